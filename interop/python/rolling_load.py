"""A steady load of long, resumable tasks through the OFFICIAL MCP Python SDK v1 client (its
experimental tasks API), for the rolling-deploy test (crates/cli/tests/rolling_deploy.rs): while
the replicas behind the balancer are stopped and started one by one, this creates COUNT tasks, one
every SPACING ms, alternating the demo's `pipeline` (step journal) and the `process_items` command
tool (checkpoints; LEDGER_DIR/py-N.txt is its ledger), follows each to its end, and prints one JSON
line: {"created": [...], "results": {taskId: {status, ...}}}.

A server that is stopping refuses new calls (HTTP 503, Retry-After) and a balancer may lose a
request in flight: creates and polls are tried again, as any client of a rolling service must.

Usage: python rolling_load.py URL COUNT SPACING_MS LEDGER_DIR
"""

import asyncio
import json
import sys
import time
import warnings

warnings.filterwarnings("ignore", message=r".*experimental tasks API is deprecated.*")
warnings.filterwarnings("ignore", category=DeprecationWarning)

import httpx  # noqa: E402
from mcp import ClientSession, types  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

BUDGET_S = 150.0
STARTED = time.monotonic()


async def retrying(what, f):
    last = None
    while time.monotonic() - STARTED < BUDGET_S:
        try:
            return await asyncio.wait_for(f(), timeout=10)
        except Exception as e:  # noqa: BLE001 - any failure during a restart is tried again
            last = e
            await asyncio.sleep(0.3)
    raise RuntimeError(f"{what}: {last!r}")


async def main() -> None:
    url, count, spacing, ledger_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    http = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(10.0, read=60.0))
    async with http, streamable_http_client(url, http_client=http) as (read, write, _):
        async with ClientSession(read, write) as session:
            await retrying("initialize", session.initialize)
            xp = session.experimental

            async def create(i: int) -> str:
                if i % 2 == 0:
                    name, args = "pipeline", {"items": 8, "seconds_per_item": 0.5}
                else:
                    name, args = "process_items", {
                        "items": 8,
                        "seconds": 0.5,
                        "ledger": f"{ledger_dir}/py-{i}.txt",
                    }
                ctr = await retrying(f"create {i}", lambda: xp.call_tool_as_task(name, args, ttl=600_000))
                return ctr.task.taskId

            async def follow(tid: str) -> dict:
                while True:
                    t = await retrying(f"get {tid}", lambda: xp.get_task(tid))
                    if t.status in ("completed", "failed", "cancelled"):
                        out = {"status": t.status, "statusMessage": t.statusMessage}
                        if t.status == "completed":
                            r = await retrying(
                                f"result {tid}", lambda: xp.get_task_result(tid, types.CallToolResult)
                            )
                            out["structuredContent"] = r.structuredContent
                            out["text"] = "\n".join(getattr(c, "text", "") for c in r.content)
                        return out
                    if time.monotonic() - STARTED > BUDGET_S:
                        return {"status": "lost", "statusMessage": f"still {t.status}"}
                    await asyncio.sleep(0.25)

            created, follows = [], []
            for i in range(count):
                tid = await create(i)
                created.append(tid)
                follows.append(asyncio.create_task(follow(tid)))
                await asyncio.sleep(spacing / 1000)
            results = {tid: r for tid, r in zip(created, await asyncio.gather(*follows))}
            print(json.dumps({"created": created, "results": results}), flush=True)


asyncio.run(main())
