"""A ChatGPT-like MCP Events client for the tests: webhook only (no polls, no cursors), and a
strict receiver that verifies every POST with the official `standardwebhooks` library, answers
the verification challenge, and refuses anything it cannot verify (401).

    events_chatgpt_like.py MCP_URL TOKEN [--hold]

Speaks 2026-07-28 (`server/discover`, then `events/list`, `events/subscribe`). One JSON line per
step on stdout: {"discovered": caps}, {"listed": [names]}, {"subscribed": result}; the test then
runs a task as the same principal; {"event": {"headers": {...}, "body": {...}}} for the first
event (checked here: `webhook-id` = `eventId`, `X-MCP-Subscription-Id` = the subscription's id, no
`type`), {"unsubscribed": result}; with --hold it waits for a line on stdin before it
unsubscribes. Exits 1 with {"error": "..."}. Loopback only.
"""

import base64
import json
import secrets
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

MCP_URL, TOKEN = sys.argv[1], sys.argv[2]
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
got = []
refused = []


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            Webhook(SECRET).verify(body, headers)
        except WebhookVerificationError as e:
            refused.append(str(e))
            return self.reply(401, {})
        msg = json.loads(body)
        if msg.get("type") == "verification":
            return self.reply(200, {"challenge": msg["challenge"]})
        got.append({"headers": headers, "body": msg})
        self.reply(200, {})

    def reply(self, status, obj):
        out = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


hook = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=hook.serve_forever, daemon=True).start()
HOOK = f"http://127.0.0.1:{hook.server_address[1]}/hooks/cb_1"
ids = iter(range(1, 1000))


def rpc(method, params=None):
    params = {
        **(params or {}),
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "chatgpt-like", "version": "0"},
        },
    }
    req = urllib.request.Request(
        MCP_URL,
        json.dumps({"jsonrpc": "2.0", "id": next(ids), "method": method, "params": params}).encode(),
        {
            "Content-Type": "application/json",
            "Mcp-Method": method,
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Authorization": f"Bearer {TOKEN}",
        },
    )
    msg = json.loads(urllib.request.urlopen(req, timeout=30).read())
    if "error" in msg:
        raise RuntimeError(msg["error"])
    return msg["result"]


def main():
    caps = rpc("server/discover")["capabilities"]
    assert "events" in caps, caps
    say({"discovered": caps})
    say({"listed": [e["name"] for e in rpc("events/list")["events"]]})
    args = {
        "name": "task.finished",
        "arguments": {},
        "delivery": {"mode": "webhook", "url": HOOK, "secret": SECRET},
        "cursor": None,
    }
    sub = rpc("events/subscribe", args)
    say({"subscribed": sub})
    for _ in range(600):
        if got:
            break
        time.sleep(0.05)
    if not got:
        raise RuntimeError(f"no event in 30 s (refused: {refused})")
    first = got[0]
    h, m = first["headers"], first["body"]
    assert h["webhook-id"] == m["eventId"], (h, m)
    assert h["x-mcp-subscription-id"] == sub["id"], (h, sub)
    assert "type" not in m, m
    say({"event": first})
    if "--hold" in sys.argv[3:]:
        sys.stdin.readline()
    out = rpc(
        "events/unsubscribe",
        {"name": args["name"], "arguments": args["arguments"], "delivery": {"mode": "webhook", "url": HOOK}},
    )
    say({"unsubscribed": out, "refused": refused})


try:
    main()
except Exception as e:  # the test reads the reason
    say({"error": repr(e)})
    sys.exit(1)
