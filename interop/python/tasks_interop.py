#!/usr/bin/env python3
"""Interop checks: the official MCP Python SDK (v1, `mcp==1.29.x`) as a client
of the mcp-tasks server's demo tools, exercising MCP Tasks (spec 2025-11-25,
SEP-1686) through the SDK's experimental client tasks API.

Usage:
    python tasks_interop.py http  http://127.0.0.1:PORT/mcp
    python tasks_interop.py stdio /path/to/mcp-tasks
    (optional: --trace FILE  writes every JSON-RPC message both ways; '-' = stderr)

Output: one line per check, `ok - NAME` or `not ok - NAME: REASON`; lines that
start with `# ` are diagnostics. The last line is exactly `N passed, M failed`.
Exit code 0 when nothing failed, 1 otherwise (2 for a usage error).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TextIO

# `ClientSession.experimental` is marked @deprecated in mcp 1.29 ("tasks (SEP-1686)
# were removed from the MCP specification ..."); every access warns. The API is
# exactly what is under test here, so silence that one warning.
warnings.filterwarnings("ignore", message=r".*experimental tasks API is deprecated.*")

import anyio  # noqa: E402
import httpx  # noqa: E402
import mcp.types as types  # noqa: E402
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream  # noqa: E402
from mcp import ClientSession, McpError, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402

OVERALL_TIMEOUT_S = 55.0  # the whole run, connection set-up and teardown included
DEFAULT_CHECK_TIMEOUT_S = 10.0
PROGRESS_TOKEN = f"interop-progress-{uuid.uuid4().hex[:8]}"
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
STDIO_ARGS = ["serve", "--demo", "--stdio", "--store", "memory:"]

# Every check, in the order it runs. A check that never got to run (connection
# lost, overall timeout) is still reported, as `not ok`, so the count is stable.
CHECKS = [
    "initialize",
    "capabilities.tasks",
    "tools/list taskSupport",
    "greet normal call",
    "slow_compute task created",
    "slow_compute poll_task until completed",
    "slow_compute get_task_result",
    "tasks/result _meta related-task",
    "slow_compute progress notifications",
    "get_task ttl/createdAt/lastUpdatedAt",
    "tasks/result blocks until terminal",
    "cancel_task -> cancelled",
    "second cancel_task -> -32602",
    "failing_job ends failed",
    "failing_job get_task_result isError",
    "protocol_error_job ends failed",
    "protocol_error_job get_task_result -> -32603",
    "list_tasks contains created ids",
    "get_task unknown id -> -32602",
    "all inbound messages valid for the SDK",
]


class CheckFailed(Exception):
    """A check's expectation was not met (as opposed to a crash)."""


def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def describe_exc(exc: BaseException) -> str:
    if isinstance(exc, McpError):
        e = exc.error
        s = f"McpError code={e.code} message={e.message!r}"
        if e.data is not None:
            s += f" data={e.data!r}"
        return s
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_exc(e) for e in leaf_exceptions(exc))
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect: {exc or type(exc).__name__}"
    text = "\n".join(
        ln for ln in str(exc).strip().splitlines() if not ln.strip().startswith("For further information")
    ).replace("\n", " | ")
    if len(text) > 400:
        text = text[:400] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for e in exc.exceptions:
            out.extend(leaf_exceptions(e))
        return out
    return [exc]


def expect_mcp_error(exc: BaseException | None, code: int, what: str) -> str:
    expect(exc is not None, f"{what}: expected McpError code {code}, but the call succeeded")
    expect(isinstance(exc, McpError), f"{what}: expected McpError code {code}, got {describe_exc(exc)}")
    assert isinstance(exc, McpError)
    expect(exc.error.code == code, f"{what}: expected code {code}, got {describe_exc(exc)}")
    return f"code={exc.error.code} message={exc.error.message!r}"


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


class Runner:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.results: dict[str, tuple[bool, str]] = {}

    def emit(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def note(self, line: str) -> None:
        self.emit(f"# {line}")

    def record(self, name: str, ok: bool, reason: str = "") -> None:
        assert name in CHECKS, name
        if name in self.results:
            return
        self.results[name] = (ok, reason)
        if ok:
            self.emit(f"ok - {name}" + (f" # {reason}" if reason else ""))
        else:
            self.emit(f"not ok - {name}: {reason}")

    def passed(self, name: str) -> bool:
        return self.results.get(name, (False, ""))[0]

    async def check(
        self,
        name: str,
        fn: Callable[[], Awaitable[str | None]],
        *,
        timeout: float = DEFAULT_CHECK_TIMEOUT_S,
        needs: tuple[str, ...] = (),
    ) -> bool:
        for dep in needs:
            if not self.passed(dep):
                self.record(name, False, f"not run: prerequisite '{dep}' did not pass")
                return False
        started = time.monotonic()
        try:
            with anyio.fail_after(timeout):
                detail = await fn()
        except TimeoutError:
            self.record(name, False, f"timed out after {timeout:.0f} s")
            return False
        except CheckFailed as e:
            self.record(name, False, str(e))
            return False
        except Exception as e:  # noqa: BLE001 - any crash is a failed check
            self.record(name, False, describe_exc(e))
            return False
        took = time.monotonic() - started
        self.record(name, True, f"{detail} ({took:.1f} s)" if detail else f"{took:.1f} s")
        return True


class Observed:
    """What arrived on the session outside of request/response pairs."""

    def __init__(self) -> None:
        self.progress: list[types.ProgressNotificationParams] = []
        self.task_status: list[types.TaskStatusNotificationParams] = []
        self.other: list[str] = []
        self.progress_event = anyio.Event()

    async def message_handler(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.other.append(f"transport/parse error: {describe_exc(message)}")
            return
        if isinstance(message, types.ServerNotification):
            root = message.root
            if isinstance(root, types.ProgressNotification):
                self.progress.append(root.params)
                self.progress_event.set()
            elif isinstance(root, types.TaskStatusNotification):
                self.task_status.append(root.params)
            else:
                self.other.append(f"notification {root.method}")
            return
        # A server->client request (sampling, elicitation, roots): not expected here.
        self.other.append(f"server request {type(message).__name__}")


class SdkLogCapture(logging.Handler):
    """The SDK logs (rather than raises) notifications it cannot validate,
    unknown response ids and transport trouble; keep those as diagnostics."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001
            msg = str(record.msg)
        line = f"{record.levelname} {record.name}: {condense_validation(msg)}".replace("\n", " | ")
        if len(line) > 1200:
            line = line[:600] + " ... " + line[-500:]
        self.lines.append(line)


def condense_validation(msg: str) -> str:
    """Shrink a pydantic union ValidationError as logged by the SDK ("Failed to
    validate notification: N validation errors for ServerNotification ...
    Message was: ...") to the errors of the union member(s) whose `method`
    matched, dropping the noise from all the others."""
    if "validation error" not in msg:
        return msg
    body, sep, tail = msg.partition(". Message was: ")
    lines = body.split("\n")
    blocks: list[list[str]] = []
    for ln in lines[1:]:
        if ln and not ln.startswith(" "):
            blocks.append([ln])
        elif blocks and ln.strip() and not ln.strip().startswith("For further information"):
            blocks[-1].append(ln.strip())
    wrong_method = {
        b[0].split(".")[0] for b in blocks if b[0].endswith(".method") and any("literal_error" in x for x in b[1:])
    }
    kept = [b for b in blocks if b[0].split(".")[0] not in wrong_method] or blocks
    out = lines[0] + " " + "; ".join(f"{b[0]}: {' '.join(b[1:])}" for b in kept)
    return out + (f". Message was: {tail}" if sep else "")


@contextlib.asynccontextmanager
async def traced(
    read: MemoryObjectReceiveStream[SessionMessage | Exception],
    write: MemoryObjectSendStream[SessionMessage],
    sink: TextIO | None,
) -> AsyncIterator[tuple[Any, Any]]:
    """Optionally tap both message streams, writing each JSON-RPC message (as
    the SDK parsed it) to `sink`."""
    if sink is None:
        yield read, write
        return
    t0 = time.monotonic()

    def log(direction: str, m: SessionMessage | Exception) -> None:
        body = (
            m.message.model_dump_json(by_alias=True, exclude_none=True)
            if isinstance(m, SessionMessage)
            else f"<exception {describe_exc(m)}>"
        )
        print(f"[{time.monotonic() - t0:7.3f}] {direction} {body}", file=sink, flush=True)

    in_send, in_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    out_send, out_recv = anyio.create_memory_object_stream[SessionMessage](0)

    # Either side may close first at teardown; a message in flight then is dropped.
    async def pump_in() -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async with in_send:
                async for m in read:
                    log("<-", m)
                    await in_send.send(m)

    async def pump_out() -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            async with out_recv:
                async for m in out_recv:
                    log("->", m)
                    await write.send(m)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_in)
        tg.start_soon(pump_out)
        try:
            yield in_recv, out_send
        finally:
            tg.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def open_transport(kind: str, target: str) -> AsyncIterator[tuple[Any, Any]]:
    if kind == "http":
        # trust_env=False: never route loopback traffic through an env proxy.
        http = httpx.AsyncClient(
            trust_env=False,
            follow_redirects=True,
            timeout=httpx.Timeout(10.0, read=60.0),
        )
        async with http:
            async with streamable_http_client(target, http_client=http) as (read, write, _get_session_id):
                yield read, write
    else:
        # stdio_client gives the child only a small whitelist of variables (HOME,
        # PATH, ...); pass through the ones that matter for the server under test.
        env = {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("RUST_", "MCP_TASKS_")) or k == "MOCK_BUGS"
        }
        params = StdioServerParameters(command=target, args=STDIO_ARGS, env=env or None)
        async with stdio_client(params, errlog=sys.stderr) as (read, write):
            yield read, write


async def run_checks(session: ClientSession, r: Runner, obs: Observed, logs: SdkLogCapture) -> None:
    xp = session.experimental  # ExperimentalClientFeatures
    state: dict[str, Any] = {"created": []}
    label = f"interop-{uuid.uuid4().hex[:8]}"

    # --- lifecycle ------------------------------------------------------------
    async def c_initialize() -> str:
        init = await session.initialize()
        state["init"] = init
        expect(
            init.protocolVersion == types.LATEST_PROTOCOL_VERSION,
            f"protocolVersion {init.protocolVersion!r}, expected {types.LATEST_PROTOCOL_VERSION!r}",
        )
        return f"protocolVersion={init.protocolVersion} server={init.serverInfo.name} {init.serverInfo.version}"

    if not await r.check("initialize", c_initialize):
        return  # nothing else can work; the rest is reported as not run

    async def c_caps() -> str:
        caps = state["init"].capabilities
        t = caps.tasks
        expect(t is not None, "capabilities.tasks missing")
        missing = []
        if t.list is None:
            missing.append("list")
        if t.cancel is None:
            missing.append("cancel")
        if t.requests is None or t.requests.tools is None or t.requests.tools.call is None:
            missing.append("requests.tools.call")
        expect(not missing, f"capabilities.tasks lacks {', '.join(missing)}: {t.model_dump(exclude_none=True)}")
        return str(t.model_dump(exclude_none=True))

    await r.check("capabilities.tasks", c_caps, needs=("initialize",))

    async def c_tools() -> str:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(20):
            page = await session.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
            )
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                break
        got = {t.name: (t.execution.taskSupport if t.execution else None) for t in tools}
        want = {
            "greet": "forbidden",
            "slow_compute": "optional",
            "failing_job": "required",
            "protocol_error_job": "optional",
        }
        bad = [f"{n}: got {got.get(n, '<tool missing>')!r}, want {w!r}" for n, w in want.items() if got.get(n) != w]
        expect(not bad, "; ".join(bad))
        return ", ".join(f"{n}={got[n]}" for n in want)

    await r.check("tools/list taskSupport", c_tools, needs=("initialize",))

    async def c_greet() -> str:
        res = await session.call_tool("greet", {"name": "Interop"})
        expect(not res.isError, f"isError true: {text_of(res)!r}")
        txt = text_of(res)
        expect(txt == "Hello, Interop!", f"text {txt!r}, want 'Hello, Interop!'")
        return repr(txt)

    await r.check("greet normal call", c_greet, needs=("initialize",))

    # --- a task that completes --------------------------------------------------
    requested_ttl = 120_000

    async def c_create() -> str:
        state["slow_t0"] = time.monotonic()
        ctr = await xp.call_tool_as_task(
            "slow_compute",
            {"seconds": 2, "label": label},
            ttl=requested_ttl,
            meta={"progressToken": PROGRESS_TOKEN},
        )
        t = ctr.task
        state["slow_id"] = t.taskId
        state["created"].append(t.taskId)
        expect(bool(t.taskId), "empty taskId")
        expect(t.status == "working", f"initial status {t.status!r}, want 'working'")
        return f"taskId={t.taskId} status={t.status} ttl={t.ttl} pollInterval={t.pollInterval}"

    await r.check("slow_compute task created", c_create, needs=("initialize",))

    async def poll_to_terminal(task_id: str) -> tuple[types.GetTaskResult, str]:
        seen: list[str] = []
        last: types.GetTaskResult | None = None
        async for st in xp.poll_task(task_id):
            last = st
            if not seen or seen[-1] != st.status:
                seen.append(st.status)
        assert last is not None
        return last, " -> ".join(seen)

    async def c_poll() -> str:
        last, path = await poll_to_terminal(state["slow_id"])
        state["slow_final"] = last
        expect(last.status == "completed", f"ended {last.status!r} ({path}), statusMessage={last.statusMessage!r}")
        return f"statuses: {path}"

    await r.check(
        "slow_compute poll_task until completed", c_poll, timeout=15, needs=("slow_compute task created",)
    )

    async def c_result() -> str:
        res = await xp.get_task_result(state["slow_id"], types.CallToolResult)
        txt = text_of(res)
        expect(not res.isError, f"isError true: {txt!r}")
        expect(label in txt, f"text {txt!r} lacks label {label!r}")
        return repr(txt)

    await r.check("slow_compute get_task_result", c_result, needs=("slow_compute poll_task until completed",))

    async def c_related() -> str:
        # Spec 2025-11-25: the tasks/result response MUST carry
        # _meta["io.modelcontextprotocol/related-task"] = {"taskId": ...}.
        res = await xp.get_task_result(state["slow_id"], types.CallToolResult)
        meta = res.meta or {}
        rel = meta.get(RELATED_TASK_KEY)
        expect(rel is not None, f"no _meta[{RELATED_TASK_KEY!r}] in tasks/result (got _meta={meta!r})")
        expect(
            isinstance(rel, dict) and rel.get("taskId") == state["slow_id"],
            f"_meta[{RELATED_TASK_KEY!r}] = {rel!r}, want {{'taskId': {state['slow_id']!r}}}",
        )
        return f"{RELATED_TASK_KEY}={rel}"

    await r.check("tasks/result _meta related-task", c_related, needs=("slow_compute poll_task until completed",))

    async def c_progress() -> str:
        # Allow a late notification to land (it may trail the final status).
        with anyio.move_on_after(1.5):
            while not any(p.progressToken == PROGRESS_TOKEN for p in obs.progress):
                obs.progress_event = anyio.Event()
                await obs.progress_event.wait()
        mine = [p for p in obs.progress if p.progressToken == PROGRESS_TOKEN]
        others = [p for p in obs.progress if p.progressToken != PROGRESS_TOKEN]
        seen = ", ".join(f"{p.progress:g}/{p.total:g}" if p.total is not None else f"{p.progress:g}" for p in mine)
        expect(
            bool(mine),
            f"no notifications/progress with progressToken {PROGRESS_TOKEN!r} arrived"
            f" (progress with other tokens: {len(others)}; notifications/tasks/status: {len(obs.task_status)})",
        )
        values = [p.progress for p in mine]
        expect(values == sorted(values), f"progress not increasing: {seen}")
        wrong_total = [p.total for p in mine if p.total is not None and p.total != 2]
        expect(not wrong_total, f"total should be 2, got {wrong_total}: {seen}")
        return f"{len(mine)} notification(s): {seen}"

    await r.check("slow_compute progress notifications", c_progress, needs=("slow_compute task created",))

    async def c_meta() -> str:
        t = await xp.get_task(state["slow_id"])
        # The SDK's pydantic model already requires createdAt, lastUpdatedAt and a
        # `ttl` key (int or null); anything missing would have raised on parse.
        expect(t.taskId == state["slow_id"], f"taskId {t.taskId!r} != {state['slow_id']!r}")
        expect(t.status == "completed", f"status {t.status!r}, want 'completed'")
        expect(t.ttl is not None, "ttl is null (unlimited) although a ttl was requested")
        expect(t.createdAt.tzinfo is not None, f"createdAt {t.createdAt.isoformat()} has no timezone")
        expect(
            t.lastUpdatedAt >= t.createdAt,
            f"lastUpdatedAt {t.lastUpdatedAt.isoformat()} < createdAt {t.createdAt.isoformat()}",
        )
        run_s = (t.lastUpdatedAt - t.createdAt).total_seconds()
        expect(run_s >= 1.5, f"lastUpdatedAt - createdAt = {run_s:.2f} s for a 2 s job")
        return (
            f"ttl={t.ttl} (requested {requested_ttl}) createdAt={t.createdAt.isoformat()} "
            f"lastUpdatedAt={t.lastUpdatedAt.isoformat()} pollInterval={t.pollInterval}"
        )

    await r.check(
        "get_task ttl/createdAt/lastUpdatedAt", c_meta, needs=("slow_compute poll_task until completed",)
    )

    async def c_blocking() -> str:
        blabel = f"{label}-blocking"
        ctr = await xp.call_tool_as_task("slow_compute", {"seconds": 1, "label": blabel}, ttl=60_000)
        state["created"].append(ctr.task.taskId)
        t0 = time.monotonic()
        # tasks/result on a non-terminal task must wait for the terminal state.
        res = await xp.get_task_result(ctr.task.taskId, types.CallToolResult)
        waited = time.monotonic() - t0
        txt = text_of(res)
        expect(not res.isError, f"isError true: {txt!r}")
        expect(blabel in txt, f"text {txt!r} lacks label {blabel!r}")
        st = await xp.get_task(ctr.task.taskId)
        expect(st.status == "completed", f"after tasks/result returned, status is {st.status!r}")
        return f"returned after {waited:.1f} s with {txt!r}"

    await r.check("tasks/result blocks until terminal", c_blocking, needs=("initialize",))

    # --- cancellation ---------------------------------------------------------
    async def c_cancel() -> str:
        ctr = await xp.call_tool_as_task("slow_compute", {"seconds": 30, "label": f"{label}-cancel"}, ttl=60_000)
        tid = ctr.task.taskId
        state["cancel_id"] = tid
        state["created"].append(tid)
        cr = await xp.cancel_task(tid)
        expect(cr.taskId == tid, f"cancel returned taskId {cr.taskId!r}")
        expect(cr.status == "cancelled", f"tasks/cancel returned status {cr.status!r}")
        await anyio.sleep(0.5)
        st = await xp.get_task(tid)
        expect(st.status == "cancelled", f"tasks/get after cancel: status {st.status!r}")
        return f"taskId={tid} statusMessage={st.statusMessage!r}"

    await r.check("cancel_task -> cancelled", c_cancel, needs=("initialize",))

    async def c_cancel_again() -> str:
        err: BaseException | None = None
        try:
            res = await xp.cancel_task(state["cancel_id"])
            r.note(f"second tasks/cancel unexpectedly succeeded: {res.model_dump(mode='json', exclude_none=True)}")
        except McpError as e:
            err = e
        return expect_mcp_error(err, INVALID_PARAMS, "tasks/cancel on a cancelled task")

    await r.check("second cancel_task -> -32602", c_cancel_again, needs=("cancel_task -> cancelled",))

    # --- a tool whose result is isError:true ----------------------------------
    async def c_failing() -> str:
        ctr = await xp.call_tool_as_task("failing_job", {}, ttl=60_000)
        state["failing_id"] = ctr.task.taskId
        state["created"].append(ctr.task.taskId)
        last, path = await poll_to_terminal(ctr.task.taskId)
        state["failing_terminal"] = last.status
        expect(last.status == "failed", f"ended {last.status!r} ({path}), want 'failed'")
        return f"statuses: {path}; statusMessage={last.statusMessage!r}"

    await r.check("failing_job ends failed", c_failing, timeout=15, needs=("initialize",))

    async def c_failing_result() -> str:
        expect("failing_terminal" in state, "not run: the failing_job task never reached a terminal status")
        res = await xp.get_task_result(state["failing_id"], types.CallToolResult)
        expect(res.isError, f"isError is false; content {text_of(res)!r}")
        return f"isError=true content={text_of(res)!r}"

    await r.check("failing_job get_task_result isError", c_failing_result, needs=("initialize",))

    # --- a tool that ends in a JSON-RPC error ---------------------------------
    async def c_proto() -> str:
        ctr = await xp.call_tool_as_task("protocol_error_job", {}, ttl=60_000)
        state["proto_id"] = ctr.task.taskId
        state["created"].append(ctr.task.taskId)
        last, path = await poll_to_terminal(ctr.task.taskId)
        state["proto_terminal"] = last.status
        expect(last.status == "failed", f"ended {last.status!r} ({path}), want 'failed'")
        return f"statuses: {path}; statusMessage={last.statusMessage!r}"

    await r.check("protocol_error_job ends failed", c_proto, timeout=15, needs=("initialize",))

    async def c_proto_result() -> str:
        expect("proto_terminal" in state, "not run: the protocol_error_job task never reached a terminal status")
        err: BaseException | None = None
        try:
            res = await xp.get_task_result(state["proto_id"], types.CallToolResult)
            r.note(f"tasks/result unexpectedly succeeded: {res.model_dump(mode='json', exclude_none=True)}")
        except McpError as e:
            err = e
        return expect_mcp_error(err, INTERNAL_ERROR, "tasks/result of protocol_error_job")

    await r.check(
        "protocol_error_job get_task_result -> -32603", c_proto_result, needs=("initialize",)
    )

    # --- listing and unknown ids ------------------------------------------------
    async def c_list() -> str:
        listed: list[types.Task] = []
        cursor: str | None = None
        pages = 0
        for _ in range(50):
            page = await xp.list_tasks(cursor)
            pages += 1
            listed.extend(page.tasks)
            cursor = page.nextCursor
            if not cursor:
                break
        ids = {t.taskId for t in listed}
        missing = [tid for tid in state["created"] if tid not in ids]
        expect(bool(state["created"]), "no task was created earlier, nothing to look for")
        expect(not missing, f"missing {missing} among {len(listed)} listed task(s)")
        by_id = {t.taskId: t.status for t in listed}
        return f"{len(listed)} task(s) in {pages} page(s); " + ", ".join(
            f"{tid[:12]}={by_id[tid]}" for tid in state["created"]
        )

    await r.check("list_tasks contains created ids", c_list, needs=("initialize",))

    async def c_unknown() -> str:
        err: BaseException | None = None
        try:
            res = await xp.get_task(f"no-such-task-{uuid.uuid4().hex}")
            r.note(f"tasks/get on an unknown id unexpectedly succeeded: {res.model_dump(mode='json')}")
        except McpError as e:
            err = e
        return expect_mcp_error(err, INVALID_PARAMS, "tasks/get on an unknown id")

    await r.check("get_task unknown id -> -32602", c_unknown, needs=("initialize",))

    async def c_inbound() -> str:
        # The SDK drops (and only logs) notifications that fail its schema, and hands
        # unparseable lines / responses to unknown ids to the message handler.
        await anyio.sleep(0.2)
        bad = [ln for ln in logs.lines if "Failed to validate" in ln or "Failed to parse" in ln]
        bad += [o for o in obs.other if o.startswith("transport/parse error")]
        expect(not bad, f"{len(bad)} rejected inbound message(s), first: {bad[0] if bad else ''}")
        return (
            f"{len(obs.progress)} progress, {len(obs.task_status)} tasks/status, "
            f"{len(obs.other)} other notification(s)/request(s)"
        )

    await r.check("all inbound messages valid for the SDK", c_inbound, needs=("initialize",))

    # --- informational probes (not counted) -------------------------------------
    async def probe(what: str, coro: Awaitable[Any]) -> None:
        try:
            with anyio.fail_after(5):
                res = await coro
            r.note(f"info: {what}: succeeded: {res.model_dump(mode='json', exclude_none=True)}")
        except TimeoutError:
            r.note(f"info: {what}: no answer within 5 s")
        except Exception as e:  # noqa: BLE001
            r.note(f"info: {what}: {describe_exc(e)}")

    await probe("tools/call failing_job without task (taskSupport=required)", session.call_tool("failing_job", {}))
    await probe(
        "tools/call greet with task (taskSupport=forbidden)",
        xp.call_tool_as_task("greet", {"name": "Interop"}, ttl=60_000),
    )


def print_observations(r: Runner, obs: Observed, logs: SdkLogCapture) -> None:
    if obs.progress:
        r.note(
            "notifications/progress received: "
            + ", ".join(f"token={p.progressToken!r} {p.progress:g}/{p.total}" for p in obs.progress)
        )
    r.note(f"notifications/tasks/status received: {len(obs.task_status)}")
    for p in obs.task_status[:20]:
        r.note(f"  tasks/status taskId={p.taskId} status={p.status} statusMessage={p.statusMessage!r}")
    for line in obs.other[:20]:
        r.note(f"other inbound: {line}")
    counts: dict[str, int] = {}
    for line in logs.lines:
        counts[line] = counts.get(line, 0) + 1
    for line, n in list(counts.items())[:20]:
        r.note(f"sdk log{f' (x{n})' if n > 1 else ''}: {line}")


async def main_async(kind: str, target: str, trace: TextIO | None) -> int:
    r = Runner(sys.stdout)
    obs = Observed()
    logs = SdkLogCapture()
    logging.getLogger().addHandler(logs)
    r.note(f"mcp-tasks interop: official Python SDK mcp {pkg_version('mcp')}, transport={kind}, target={target}")

    fatal: str | None = None
    failure: str | None = None
    try:
        with anyio.fail_after(OVERALL_TIMEOUT_S):
            async with open_transport(kind, target) as (read, write):
                async with traced(read, write, trace) as (read2, write2):
                    async with ClientSession(
                        read2,
                        write2,
                        message_handler=obs.message_handler,
                        client_info=types.Implementation(name="mcp-tasks-interop-python", version="0.1.0"),
                    ) as session:
                        await run_checks(session, r, obs, logs)
    except TimeoutError:
        failure = f"overall time limit of {OVERALL_TIMEOUT_S:.0f} s reached"
    except BaseException as e:  # noqa: BLE001 - includes ExceptionGroups from the transports
        if isinstance(e, KeyboardInterrupt):
            raise
        failure = describe_exc(e)

    if failure:
        if all(name in r.results for name in CHECKS):
            r.note(f"error while closing the session (after all checks ran): {failure}")
        else:
            fatal = f"session with {target} failed: {failure}"
            r.note(fatal)
    for name in CHECKS:
        if name not in r.results:
            if fatal is None and not r.passed("initialize"):
                r.record(name, False, "not run: prerequisite 'initialize' did not pass")
            else:
                r.record(name, False, f"not run: {fatal or 'session ended early'}")
    print_observations(r, obs, logs)

    passed = sum(1 for ok, _ in r.results.values() if ok)
    failed = len(r.results) - passed
    r.emit(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def pkg_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("transport", choices=["http", "stdio"])
    ap.add_argument("target", help="http: server URL (e.g. http://127.0.0.1:8080/mcp); stdio: path to mcp-tasks")
    ap.add_argument("--trace", metavar="FILE", help="log every JSON-RPC message to FILE ('-' for stderr)")
    args = ap.parse_args()

    if args.transport == "http":
        if not args.target.startswith(("http://", "https://")):
            ap.error(f"http target must be a URL, got {args.target!r}")
    else:
        if not (os.path.isfile(args.target) and os.access(args.target, os.X_OK)):
            # Report it the same way as any other failure: every check not ok.
            print(f"# stdio target {args.target!r} is not an executable file")
            for name in CHECKS:
                print(f"not ok - {name}: not run: server binary {args.target!r} not found or not executable")
            print(f"0 passed, {len(CHECKS)} failed")
            return 1

    trace: TextIO | None = None
    if args.trace == "-":
        trace = sys.stderr
    elif args.trace:
        trace = open(args.trace, "w", encoding="utf-8")  # noqa: SIM115
    try:
        return anyio.run(main_async, args.transport, args.target, trace)
    finally:
        if trace is not None and trace is not sys.stderr:
            trace.close()


if __name__ == "__main__":
    sys.exit(main())
