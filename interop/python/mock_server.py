#!/usr/bin/env python3
"""A tiny stand-in for `mcp-tasks serve --demo --stdio`, used only to test
tasks_interop.py itself (no SDK involved, raw JSON-RPC over stdio).

It implements the demo tools and the 2025-11-25 tasks methods the way the
interop checks expect them. Run the checks against it with:

    python tasks_interop.py stdio ./mock_server.py

Arguments are accepted and ignored. Set MOCK_BUGS to a comma list to make it
misbehave on purpose (for testing the checks' failure reports):
    no-progress, no-ttl-key, status-no-ttl, cancel-twice-ok, wrong-proto-code,
    no-input-required (status stays working while a request is unanswered),
    no-related-task (server requests lack the related-task _meta),
    task-in-elicit (elicitation/create params carry `task`),
    no-max-tokens (sampling/createMessage without maxTokens: the SDK rejects it),
    multi-sequential (multi_input asks its second question after the first answer),
    elicit-without-cap (asks a client that did not declare elicitation),
    haiku-own-text (write_haiku ignores the sampled text),
    never-ask (confirm_delete waits forever without sending its request),
    no-input-tools (no confirm_delete / write_haiku / multi_input: an older server)
"""

import asyncio
import json
import os
import sys
import uuid
from datetime import datetime, timezone

BUGS = set(filter(None, os.environ.get("MOCK_BUGS", "").split(",")))
TOOLS = [
    {
        "name": "greet",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        "execution": {"taskSupport": "forbidden"},
    },
    {
        "name": "slow_compute",
        "inputSchema": {
            "type": "object",
            "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
            "required": ["seconds"],
        },
        "execution": {"taskSupport": "optional"},
    },
    {"name": "failing_job", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}},
    {"name": "protocol_error_job", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}},
    {
        "name": "confirm_delete",
        "inputSchema": {"type": "object", "properties": {"filename": {"type": "string"}}, "required": ["filename"]},
        "execution": {"taskSupport": "required"},
    },
    {
        "name": "write_haiku",
        "inputSchema": {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
        "execution": {"taskSupport": "required"},
    },
    {"name": "multi_input", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}},
]
RELATED = "io.modelcontextprotocol/related-task"
if "no-input-tools" in BUGS:
    TOOLS = [t for t in TOOLS if t["name"] not in ("confirm_delete", "write_haiku", "multi_input")]
TERMINAL = {"completed", "failed", "cancelled"}


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class Server:
    def __init__(self) -> None:
        self.tasks: dict[str, dict] = {}
        self.outcomes: dict[str, dict] = {}  # taskId -> {"result": ...} | {"error": ...}
        self.done: dict[str, asyncio.Event] = {}
        self.runners: dict[str, asyncio.Task] = {}
        self.client_caps: dict = {}
        self.pending: dict[str, asyncio.Future] = {}  # our request id -> future of the client's reply
        self.seq = 0

    def send(self, msg: dict) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    def task_view(self, tid: str) -> dict:
        t = dict(self.tasks[tid])
        if "no-ttl-key" in BUGS:
            t.pop("ttl", None)
        return t

    def set_status(self, tid: str, status: str, message: str | None = None) -> None:
        t = self.tasks[tid]
        if t["status"] in TERMINAL:
            return
        t["status"] = status
        t["lastUpdatedAt"] = now()
        if message:
            t["statusMessage"] = message
        params = self.task_view(tid)
        if "status-no-ttl" in BUGS:
            params.pop("ttl", None)
        self.send({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": params})
        if status in TERMINAL:
            self.done[tid].set()

    async def ask(self, tid: str, method: str, params: dict) -> asyncio.Future:
        """Send a request to the client for task `tid`; returns the future of its reply."""
        self.seq += 1
        rid = f"srv-{self.seq}"
        fut = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        if "no-related-task" not in BUGS:
            params = {**params, "_meta": {RELATED: {"taskId": tid}}}
        if method == "elicitation/create" and "task-in-elicit" in BUGS:
            params = {**params, "task": {"ttl": 1000}}
        if "no-input-required" not in BUGS:
            self.set_status(tid, "input_required")
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return fut

    async def run_input_tool(self, name: str, args: dict, tid: str) -> dict:
        def text(t: str, is_error: bool = False) -> dict:
            r = {"content": [{"type": "text", "text": t}]}
            return {"result": {**r, "isError": True} if is_error else r}

        if name == "confirm_delete":
            fn = args.get("filename")
            if "elicitation" not in self.client_caps and "elicit-without-cap" not in BUGS:
                return text(f"Kept {fn}: the client did not declare the elicitation capability", True)
            if "never-ask" in BUGS:
                self.set_status(tid, "input_required")
                await asyncio.Event().wait()
            schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
            params = {"mode": "form", "message": f"Delete {fn}?", "requestedSchema": schema}
            reply = await (await self.ask(tid, "elicitation/create", params))
            self.set_status(tid, "working")
            res = reply.get("result") or {}
            if res.get("action") == "accept" and (res.get("content") or {}).get("confirm") is True:
                return text(f"Deleted {fn}")
            return text(f"Kept {fn}")
        if name == "write_haiku":
            if "sampling" not in self.client_caps:
                return text("the client did not declare the sampling capability", True)
            prompt = {"type": "text", "text": f"Write a haiku about {args.get('topic')}."}
            params = {"messages": [{"role": "user", "content": prompt}]}
            if "no-max-tokens" not in BUGS:
                params["maxTokens"] = 100
            reply = await (await self.ask(tid, "sampling/createMessage", params))
            self.set_status(tid, "working")
            if "error" in reply:
                return {"error": {"code": -32603, "message": f"sampling failed: {reply['error']}"}}
            if "haiku-own-text" in BUGS:
                return text("an old silent pond")
            return text(reply["result"]["content"]["text"])
        if name == "multi_input":
            if "elicitation" not in self.client_caps:
                return text("the client did not declare the elicitation capability", True)

            def q(prop: str, msg: str) -> dict:
                schema = {"type": "object", "properties": {prop: {"type": "string"}}, "required": [prop]}
                return {"message": msg, "requestedSchema": schema}

            f1 = await self.ask(tid, "elicitation/create", q("name", "What is your name?"))
            if "multi-sequential" in BUGS:
                r1 = await f1
                f2 = await self.ask(tid, "elicitation/create", q("color", "Favourite colour?"))
                r2 = await f2
            else:
                f2 = await self.ask(tid, "elicitation/create", q("color", "Favourite colour?"))
                r1, r2 = await asyncio.gather(f1, f2)
            self.set_status(tid, "working")
            name_v = ((r1.get("result") or {}).get("content") or {}).get("name")
            color_v = ((r2.get("result") or {}).get("content") or {}).get("color")
            return text(f"Hello {name_v}, you like {color_v}.")
        return {"error": {"code": -32602, "message": f"unknown tool {name}"}}

    async def run_tool(self, name: str, args: dict, token, tid: str | None = None) -> dict:
        """Returns {"result": CallToolResult} or {"error": ErrorData}."""
        if name in ("confirm_delete", "write_haiku", "multi_input"):
            return await self.run_input_tool(name, args, tid)
        if name == "greet":
            return {"result": {"content": [{"type": "text", "text": f"Hello, {args.get('name')}!"}]}}
        if name == "slow_compute":
            secs = float(args.get("seconds", 1))
            elapsed = 0.0
            while elapsed < secs:
                step = min(1.0, secs - elapsed)
                await asyncio.sleep(step)
                elapsed += step
                if token is not None and "no-progress" not in BUGS:
                    self.send(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": elapsed, "total": secs},
                        }
                    )
            text = f"computed for {secs:g} s" + (f" [{args['label']}]" if "label" in args else "")
            return {"result": {"content": [{"type": "text", "text": text}]}}
        if name == "failing_job":
            await asyncio.sleep(1)
            return {"result": {"content": [{"type": "text", "text": "job failed"}], "isError": True}}
        if name == "protocol_error_job":
            await asyncio.sleep(0.5)
            code = -32000 if "wrong-proto-code" in BUGS else -32603
            return {"error": {"code": code, "message": "internal error in protocol_error_job"}}
        return {"error": {"code": -32602, "message": f"unknown tool {name}"}}

    async def run_task(self, tid: str, name: str, args: dict, token) -> None:
        out = await self.run_tool(name, args, token, tid)
        if self.tasks[tid]["status"] in TERMINAL:
            return
        self.outcomes[tid] = out
        failed = "error" in out or out["result"].get("isError")
        self.set_status(tid, "failed" if failed else "completed")

    async def handle(self, msg: dict) -> None:
        mid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
        if method is None and mid in self.pending:  # the client's reply to one of our requests
            fut = self.pending.pop(mid)
            if not fut.done():
                fut.set_result(msg)
            return
        if mid is None:
            return  # notification

        def ok(result: dict) -> None:
            self.send({"jsonrpc": "2.0", "id": mid, "result": result})

        def err(code: int, message: str) -> None:
            self.send({"jsonrpc": "2.0", "id": mid, "error": {"code": code, "message": message}})

        if method == "initialize":
            self.client_caps = params.get("capabilities") or {}
            return ok(
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {
                        "tools": {},
                        "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
                    },
                    "serverInfo": {"name": "mock-mcp-tasks", "version": "0.0.0"},
                }
            )
        if method == "tools/list":
            return ok({"tools": TOOLS})
        if method == "tools/call":
            name, args = params.get("name"), params.get("arguments") or {}
            token = (params.get("_meta") or {}).get("progressToken")
            support = next((t["execution"]["taskSupport"] for t in TOOLS if t["name"] == name), None)
            if support is None:
                return err(-32602, f"unknown tool {name}")
            if "task" in params:
                if support == "forbidden":
                    return err(-32601, f"tool {name} does not support task-augmented execution")
                tid = str(uuid.uuid4())
                ts = now()
                self.tasks[tid] = {
                    "taskId": tid,
                    "status": "working",
                    "createdAt": ts,
                    "lastUpdatedAt": ts,
                    "ttl": params["task"].get("ttl") or 3_600_000,
                    "pollInterval": 200,
                }
                self.done[tid] = asyncio.Event()
                self.runners[tid] = asyncio.create_task(self.run_task(tid, name, args, token))
                return ok({"task": self.task_view(tid)})
            if support == "required":
                return err(-32601, f"tool {name} requires task-augmented execution")
            out = await self.run_tool(name, args, token)
            return ok(out["result"]) if "result" in out else self.send({"jsonrpc": "2.0", "id": mid, **out})
        if method in ("tasks/get", "tasks/result", "tasks/cancel"):
            tid = params.get("taskId")
            if tid not in self.tasks:
                return err(-32602, f"unknown task {tid}")
            if method == "tasks/get":
                return ok(self.task_view(tid))
            if method == "tasks/cancel":
                if self.tasks[tid]["status"] in TERMINAL and "cancel-twice-ok" not in BUGS:
                    return err(-32602, f"task {tid} is already {self.tasks[tid]['status']}")
                self.runners[tid].cancel()
                self.set_status(tid, "cancelled", "cancelled by request")
                return ok(self.task_view(tid))
            await self.done[tid].wait()
            out = self.outcomes.get(tid)
            if out is None:
                return err(-32602, f"task {tid} was {self.tasks[tid]['status']}")
            if "error" in out:
                return self.send({"jsonrpc": "2.0", "id": mid, "error": out["error"]})
            meta = {"io.modelcontextprotocol/related-task": {"taskId": tid}}
            return ok({**out["result"], "_meta": meta})
        if method == "tasks/list":
            return ok({"tasks": [self.task_view(t) for t in self.tasks]})
        if method == "ping":
            return ok({})
        return err(-32601, f"method not found: {method}")


async def main() -> None:
    srv = Server()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pending = set()
    while line := await reader.readline():
        if line.strip():
            t = asyncio.create_task(srv.handle(json.loads(line)))
            pending.add(t)
            t.add_done_callback(pending.discard)


if __name__ == "__main__":
    asyncio.run(main())
