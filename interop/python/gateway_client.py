#!/usr/bin/env python3
"""The official MCP Python SDK v1 client (`mcp==1.29.1`) through the mcp-tasks gateway, as a host
that sends no task requests: the gateway fronts `upstream_server.py` (FastMCP) with its tools
prefixed `py_` and `sync_budget_secs = 1`.

Usage: python gateway_client.py GATEWAY_URL MARKER_DIR

Output: one line per check, `ok - NAME` or `not ok - NAME: REASON`; the last line is exactly
`N passed, M failed`. Exit code 0 when nothing failed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

URL = sys.argv[1]
MARKER_DIR = Path(sys.argv[2])
results: list[tuple[str, str | None]] = []


def check(name: str, ok: bool, why: str = "") -> None:
    results.append((name, None if ok else why or "failed"))
    print(f"ok - {name}" if ok else f"not ok - {name}: {why}", flush=True)


def text_of(r: types.CallToolResult) -> str:
    return " ".join(c.text for c in r.content if isinstance(c, types.TextContent))


async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ann"})


async def main() -> None:
    list_changed = anyio.Event()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", None)
        if isinstance(root, types.ToolListChangedNotification):
            list_changed.set()

    async with streamable_http_client(URL) as (read, write, _):
        async with ClientSession(
            read, write, elicitation_callback=elicit, message_handler=on_message
        ) as s:
            await s.initialize()
            names = [t.name for t in (await s.list_tools()).tools]
            wanted = ["py_count", "py_ask_name", "py_wait", "task_status", "task_result", "task_cancel"]
            check("tools listed with the follow-up tools", all(n in names for n in wanted), str(names))

            seen: list[float] = []

            async def progress(p: float, total: float | None, message: str | None) -> None:
                seen.append(p)

            r = await s.call_tool("py_count", {"n": 4, "delay": 0.1}, progress_callback=progress)
            check("a call within the budget answers with the result", text_of(r) == "counted to 4", text_of(r))
            check("the upstream's progress reaches the call", len(seen) >= 1, str(seen))

            r = await s.call_tool("py_ask_name", {})
            check("the upstream's elicitation is answered through the gateway", text_of(r) == "hello Ann", text_of(r))

            r = await s.call_tool("py_count", {"n": 15, "delay": 0.2})
            task_id = (r.structuredContent or {}).get("taskId")
            check(
                "a call past the budget continues as a task",
                task_id is not None and "continues in the background as task" in text_of(r),
                text_of(r),
            )
            again = await s.call_tool("py_count", {"n": 15, "delay": 0.2})
            check(
                "the same call joins the running task",
                (again.structuredContent or {}).get("taskId") == task_id,
                str(again.structuredContent),
            )
            st = await s.call_tool("task_status", {"taskId": task_id})
            check("task_status reports it", (st.structuredContent or {}).get("status") == "working", text_of(st))
            final = ""
            for _ in range(10):
                res = await s.call_tool("task_result", {"taskId": task_id})
                final = text_of(res)
                if final == "counted to 15":
                    break
            check("task_result hands over the result", final == "counted to 15", final)

            r = await s.call_tool("py_wait", {"seconds": 60})
            wait_id = (r.structuredContent or {}).get("taskId")
            c = await s.call_tool("task_cancel", {"taskId": wait_id})
            check("task_cancel cancels", text_of(c).endswith("is cancelled."), text_of(c))
            marker = MARKER_DIR / "cancelled"
            deadline = time.monotonic() + 10
            while not marker.exists() and time.monotonic() < deadline:
                await anyio.sleep(0.1)
            check("the cancel reached the upstream (its handler was cancelled)", marker.exists())

            resources = [str(r.uri) for r in (await s.list_resources()).resources]
            check("the upstream's resources are listed", "info://about" in resources, str(resources))
            read = await s.read_resource("info://about")
            body = " ".join(getattr(c, "text", "") for c in read.contents)
            check("an upstream resource is read through the gateway", body == "a FastMCP upstream", body)
            prompts = [p.name for p in (await s.list_prompts()).prompts]
            check("the upstream's prompts are listed, prefixed", "py_greet" in prompts, str(prompts))
            got = await s.get_prompt("py_greet", {"name": "Ann"})
            said = " ".join(getattr(m.content, "text", "") for m in got.messages)
            check("an upstream prompt is rendered through the gateway", "Please greet Ann warmly." in said, said)

            r = await s.call_tool("py_add_late_tool", {})
            with anyio.move_on_after(10):
                await list_changed.wait()
            check("the upstream's list change reaches the client", list_changed.is_set())
            names = [t.name for t in (await s.list_tools()).tools]
            check("the new upstream tool is listed", "py_late" in names, str(names))
            r = await s.call_tool("py_late", {})
            check("the new upstream tool runs", text_of(r) == "late tool ran", text_of(r))


async def bounded() -> None:
    with anyio.fail_after(90):
        await main()


try:
    anyio.run(bounded)
except BaseException as e:  # noqa: BLE001 - reported as a failed check
    check("the session ran to its end", False, repr(e))
failed = sum(1 for _, why in results if why)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
