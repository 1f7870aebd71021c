"""A webhook receiver for the tests: verifies every delivery with the official `standardwebhooks`
library and prints one JSON line per delivery on stdout.

    webhook_receiver.py --secret whsec_... [--port P] [--status CODE] [--retry-after VALUE]
                        [--delay SECS]

Listens on 127.0.0.1 (port 0: any free one). Its first line is {"listening": PORT}. Then, per
request: {"at" (when it came, Unix seconds), "id", "timestamp", "verified", "error"?, "body"?,
"answered"}. A delivery that verifies is answered --status (default 204); one that does not verify
is answered 400. With --retry-after, every answer carries `Retry-After: VALUE` (a receiver that
asks to be left alone, or a hostile one). With --delay, each answer waits that long (a slow
receiver). Loopback only; it runs until it is killed.
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--secret", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--status", type=int, default=204)
    ap.add_argument("--retry-after")
    ap.add_argument("--delay", type=float, default=0.0)
    args = ap.parse_args()
    hook = Webhook(args.secret)
    # Requests are served on threads of their own: one line each, whole.
    out = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            line = {
                "at": time.time(),
                "id": headers.get("webhook-id"),
                "timestamp": headers.get("webhook-timestamp"),
                "path": self.path,
            }
            try:
                line["body"] = hook.verify(raw, headers)
                line["verified"] = True
                status = args.status
            except WebhookVerificationError as e:
                line["verified"] = False
                line["error"] = str(e)
                status = 400
            line["answered"] = status
            with out:
                sys.stdout.write(json.dumps(line) + "\n")
                sys.stdout.flush()
            if args.delay:
                # Seen (the line above is out), answered late.
                time.sleep(args.delay)
            self.send_response(status)
            if args.retry_after is not None:
                self.send_header("retry-after", args.retry_after)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(json.dumps({"listening": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
