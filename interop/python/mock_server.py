#!/usr/bin/env python3
"""A tiny stand-in for `mcp-tasks serve --demo --stdio`, used only to test
tasks_interop.py itself (no SDK involved, raw JSON-RPC over stdio).

It implements the demo tools and the 2025-11-25 tasks methods the way the
interop checks expect them. Run the checks against it with:

    python tasks_interop.py stdio ./mock_server.py

Arguments are accepted and ignored. Set MOCK_BUGS to a comma list to make it
misbehave on purpose (for testing the checks' failure reports):
    no-progress, no-ttl-key, status-no-ttl, cancel-twice-ok, wrong-proto-code
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
]
TERMINAL = {"completed", "failed", "cancelled"}


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class Server:
    def __init__(self) -> None:
        self.tasks: dict[str, dict] = {}
        self.outcomes: dict[str, dict] = {}  # taskId -> {"result": ...} | {"error": ...}
        self.done: dict[str, asyncio.Event] = {}
        self.runners: dict[str, asyncio.Task] = {}

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

    async def run_tool(self, name: str, args: dict, token) -> dict:
        """Returns {"result": CallToolResult} or {"error": ErrorData}."""
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
        out = await self.run_tool(name, args, token)
        if self.tasks[tid]["status"] in TERMINAL:
            return
        self.outcomes[tid] = out
        failed = "error" in out or out["result"].get("isError")
        self.set_status(tid, "failed" if failed else "completed")

    async def handle(self, msg: dict) -> None:
        mid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
        if mid is None:
            return  # notification

        def ok(result: dict) -> None:
            self.send({"jsonrpc": "2.0", "id": mid, "result": result})

        def err(code: int, message: str) -> None:
            self.send({"jsonrpc": "2.0", "id": mid, "error": {"code": code, "message": message}})

        if method == "initialize":
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
