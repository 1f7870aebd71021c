#!/usr/bin/env python3
"""Interop checks: the official MCP Python SDK (v1, `mcp==1.29.x`) as a client
of the mcp-tasks server's demo tools, exercising MCP Tasks (spec 2025-11-25,
SEP-1686) through the SDK's experimental client tasks API, including input
requests inside tasks (status `input_required`: elicitation/create and
sampling/createMessage answered by the SDK's callbacks while the client waits
on tasks/result).

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
import json
import logging
import math
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
from mcp.shared.context import RequestContext  # noqa: E402
from mcp.shared.message import SessionMessage  # noqa: E402

OVERALL_TIMEOUT_S = 100.0  # the main session, connection set-up and teardown included
NOCAP_TIMEOUT_S = 20.0  # the second session (no elicitation/sampling capability)
DEFAULT_CHECK_TIMEOUT_S = 10.0
INPUT_CHECK_TIMEOUT_S = 20.0
INPUT_WAIT_S = 5.0  # how long to wait for an input_required status or a server request
STALL_S = 10.0  # a pending tasks/result with nothing happening counts as stuck after this
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
    # input requests inside tasks (status input_required)
    "input tools listed, taskSupport=required",
    "confirm_delete accept -> Deleted",
    "confirm_delete input_required while unanswered",
    "confirm_delete elicitation/create request",
    "confirm_delete accept confirm=false -> Kept",
    "confirm_delete decline -> Kept",
    "write_haiku sampling/createMessage request",
    "write_haiku result = sampled text",
    "multi_input two elicitations outstanding at once",
    "multi_input both answers in result",
    "list_tasks contains created ids",
    "get_task unknown id -> -32602",
    "all inbound messages valid for the SDK",
    # a second session, without elicitation/sampling callbacks
    "no elicitation capability: confirm_delete isError",
    # a third session (HTTP only) that opens no GET stream
    "no GET stream: elicitation/create on the tasks/result stream",
]
NOCAP_CHECK = "no elicitation capability: confirm_delete isError"
NOGET_CHECK = "no GET stream: elicitation/create on the tasks/result stream"
MAIN_CHECKS = [c for c in CHECKS if c not in (NOCAP_CHECK, NOGET_CHECK)]
ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"


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
        self.abandoned = 0  # requests given up on (timeouts): their late replies are expected noise

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
            self.abandoned += 1
            self.record(name, False, f"timed out after {timeout:.0f} s")
            return False
        except CheckFailed as e:
            self.record(name, False, str(e))
            return False
        except Exception as e:  # noqa: BLE001 - any crash is a failed check
            leaves = leaf_exceptions(e)
            if leaves and all(isinstance(x, CheckFailed) for x in leaves):  # from inside a task group
                self.record(name, False, "; ".join(str(x) for x in leaves))
            else:
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
        # A server->client request the session did not answer itself (elicitation and
        # sampling go to the callbacks): not expected here.
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


class Wire:
    """Sits between the transport and the ClientSession, on both message streams.

    - records every server->client JSON-RPC request as it came off the wire
      (before the SDK validates it) and every response the SDK sent back;
    - can hold server requests of given methods back from the SDK for a while:
      the SDK runs its elicitation/sampling callbacks inline in its receive loop,
      so a callback cannot wait without stalling every other reply; holding the
      request here plays a user who has not answered yet, while tasks/get still
      works;
    - optionally writes every message, both directions, to a trace sink.
    """

    def __init__(self, sink: TextIO | None, tag: str = "") -> None:
        self.sink = sink
        self.tag = tag
        self.t0 = time.monotonic()
        self.requests: list[dict[str, Any]] = []  # {"t", "id", "method", "params"} (params: the raw dict)
        self.answers: dict[Any, dict[str, Any]] = {}  # request id -> {"t", "result"} | {"t", "error"}
        self.answer_http: dict[Any, int] = {}  # request id -> HTTP status of the POST that carried the answer
        self.hold_methods: frozenset[str] = frozenset()
        self.held: list[SessionMessage] = []
        self._changed = anyio.Event()
        self._to_session: MemoryObjectSendStream[SessionMessage | Exception] | None = None

    def now(self) -> float:
        return time.monotonic() - self.t0

    def log(self, direction: str, m: SessionMessage | Exception, note: str = "") -> None:
        if self.sink is None:
            return
        body = (
            m.message.model_dump_json(by_alias=True, exclude_none=True)
            if isinstance(m, SessionMessage)
            else f"<exception {describe_exc(m)}>"
        )
        print(f"[{self.now():7.3f}] {self.tag}{direction} {body}{note}", file=self.sink, flush=True)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    poke = _notify  # wake wait_until() for a condition that is not about the wire

    async def wait_until(self, cond: Callable[[], bool], timeout: float) -> bool:
        with anyio.move_on_after(timeout):
            while not cond():
                await self._changed.wait()
        return cond()

    def since(self, mark: int, *methods: str) -> list[dict[str, Any]]:
        return [q for q in self.requests[mark:] if not methods or q["method"] in methods]

    def hold(self, *methods: str) -> None:
        self.hold_methods = frozenset(methods)

    def release(self) -> int:
        """Stop holding; hand every held request to the SDK, in arrival order."""
        self.hold_methods = frozenset()
        held, self.held = self.held, []
        for m in held:
            if self.sink is not None:
                print(f"[{self.now():7.3f}] {self.tag}.. released id={m.message.root.id!r} to the SDK",
                      file=self.sink, flush=True)
            if self._to_session is not None:
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    self._to_session.send_nowait(m)
        return len(held)

    def _inbound(self, m: SessionMessage | Exception) -> bool:
        """Record an inbound message; True if it is held back."""
        if isinstance(m, SessionMessage) and isinstance(m.message.root, types.JSONRPCRequest):
            root = m.message.root
            self.requests.append({"t": self.now(), "id": root.id, "method": root.method, "params": root.params or {}})
            held = root.method in self.hold_methods
            if held:
                self.held.append(m)
            self.log("<-", m, "   (held back from the SDK)" if held else "")
            self._notify()
            return held
        self.log("<-", m)
        return False

    def _outbound(self, m: SessionMessage) -> None:
        self.log("->", m)
        root = m.message.root
        if isinstance(root, types.JSONRPCResponse):
            self.answers[root.id] = {"t": self.now(), "result": root.result}
            self._notify()
        elif isinstance(root, types.JSONRPCError):
            self.answers[root.id] = {"t": self.now(), "error": root.error.model_dump(exclude_none=True)}
            self._notify()

    @contextlib.asynccontextmanager
    async def attach(
        self,
        read: MemoryObjectReceiveStream[SessionMessage | Exception],
        write: MemoryObjectSendStream[SessionMessage],
    ) -> AsyncIterator[tuple[Any, Any]]:
        # Unbounded towards the session, so reading off the transport never waits on
        # the SDK (held requests are re-injected later with send_nowait).
        to_session, session_read = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
        session_write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
        self._to_session = to_session

        # Either side may close first at teardown; a message in flight then is dropped.
        async def pump_in() -> None:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                async with to_session:
                    async for m in read:
                        if not self._inbound(m):
                            to_session.send_nowait(m)

        async def pump_out() -> None:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                async with from_session:
                    async for m in from_session:
                        self._outbound(m)
                        await write.send(m)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump_in)
            tg.start_soon(pump_out)
            try:
                yield session_read, session_write
            finally:
                tg.cancel_scope.cancel()


def related_task_of(meta: Any) -> Any:
    """The `io.modelcontextprotocol/related-task` value of a `_meta` (model or dict)."""
    if meta is None:
        return None
    d = meta if isinstance(meta, dict) else meta.model_dump(by_alias=True, exclude_none=True)
    return d.get(RELATED_TASK_KEY)


class Answerer:
    """The main session's elicitation and sampling callbacks. Each input check
    sets what to answer (`elicit` / `sample`); every call is recorded. With no
    answer set, the callback answers with an error (unexpected request)."""

    def __init__(self) -> None:
        self.elicit: Callable[[types.ElicitRequestParams], types.ElicitResult] | None = None
        self.sample: Callable[[types.CreateMessageRequestParams], types.CreateMessageResult] | None = None
        self.calls: list[dict[str, Any]] = []  # {"method", "request_id", "related"}

    async def elicitation_callback(
        self, context: RequestContext[ClientSession, Any], params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        self.calls.append({"method": ELICIT, "request_id": context.request_id, "related": related_task_of(params.meta)})
        if self.elicit is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="interop client: no elicitation expected now")
        return self.elicit(params)

    async def sampling_callback(
        self, context: RequestContext[ClientSession, Any], params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        self.calls.append({"method": SAMPLE, "request_id": context.request_id, "related": related_task_of(params.meta)})
        if self.sample is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="interop client: no sampling expected now")
        return self.sample(params)


def form_elicitation_problems(p: dict[str, Any], task_id: str, want: dict[str, str] | None) -> list[str]:
    """What is wrong with the params of a form-mode elicitation/create sent for
    `task_id`; `want` maps property name -> JSON type that must be requested
    (and required)."""
    problems: list[str] = []
    if p.get("mode", "form") != "form":
        problems.append(f"mode {p.get('mode')!r}, want 'form' (or absent)")
    if not isinstance(p.get("message"), str) or not p.get("message"):
        problems.append("message missing or empty")
    schema = p.get("requestedSchema")
    if not isinstance(schema, dict):
        problems.append(f"requestedSchema is {schema!r}")
    else:
        if schema.get("type") != "object":
            problems.append(f"requestedSchema.type {schema.get('type')!r}, want 'object'")
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        for name, typ in (want or {}).items():
            got = (props.get(name) or {}).get("type") if isinstance(props.get(name), dict) else None
            if got != typ:
                problems.append(f"requestedSchema.properties.{name}.type {got!r}, want {typ!r}")
            if name not in required:
                problems.append(f"requestedSchema.required {required!r} lacks {name!r}")
    problems.extend(task_request_problems(p, task_id))
    return problems


def task_request_problems(p: dict[str, Any], task_id: str) -> list[str]:
    problems: list[str] = []
    rel = related_task_of(p.get("_meta"))
    if not (isinstance(rel, dict) and rel.get("taskId") == task_id):
        problems.append(f"_meta[{RELATED_TASK_KEY!r}] = {rel!r}, want {{'taskId': {task_id!r}}}")
    if "task" in p:
        problems.append(
            f"params carry 'task' ({p['task']!r}): the SDK then treats it as a task-augmented request"
            " and answers with an error"
        )
    return problems


def sdk_handling_problems(req: dict[str, Any], ans: Answerer, wire: Wire, logs: SdkLogCapture) -> list[str]:
    """Did the SDK hand this wire request to our callback and send a result back?"""
    rid = req["id"]
    problems: list[str] = []
    if not any(c["request_id"] == rid and c["method"] == req["method"] for c in ans.calls):
        rejected = [ln for ln in logs.lines if "Failed to validate request" in ln]
        problems.append(
            f"the SDK never called the {req['method']} callback for id={rid!r}"
            + (f" (it rejected a request: {rejected[-1]})" if rejected else "")
        )
    answer = wire.answers.get(rid)
    if answer is None:
        problems.append(f"the SDK sent no response to id={rid!r}")
    elif "error" in answer:
        problems.append(f"the SDK answered id={rid!r} with a JSON-RPC error {answer['error']}")
    status = wire.answer_http.get(rid)
    if status is not None and not 200 <= status < 300:
        # 404: the SDK drops it silently; other errors end its writer (the session).
        problems.append(f"the POST carrying the answer to id={rid!r} got HTTP {status}")
    return problems


def status_path(statuses: list[str], final: str) -> str:
    seen = statuses if statuses and statuses[-1] == final else statuses + [final]
    return " -> ".join(seen)


def show_request(req: dict[str, Any]) -> str:
    return f"{req['method']} id={req['id']!r} params={json.dumps(req['params'], sort_keys=True)}"


class HttpTap(httpx.AsyncBaseTransport):
    """The httpx transport under the SDK's Streamable HTTP client: notes which HTTP
    exchange every server->client request arrived on (the SSE response of which
    POST, or the GET stream), traces HTTP exchanges, and can refuse the GET
    stream with a 405 (spec: the server MAY do so; the SDK then simply has no
    GET stream, which is what a client that never opens one looks like)."""

    def __init__(self, wire: Wire, refuse_get: bool = False) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.wire = wire
        self.sink = wire.sink
        self.tag = wire.tag
        self.refuse_get = refuse_get
        self.t0 = wire.t0  # one clock for both trace layers
        self.via: dict[Any, str] = {}  # server request id -> the HTTP exchange it came on
        self.gets_refused = 0

    def log(self, line: str) -> None:
        if self.sink is not None:
            print(f"[{time.monotonic() - self.t0:7.3f}] {self.tag}HTTP {line}", file=self.sink, flush=True)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            label = "GET stream"
            if self.refuse_get:
                self.gets_refused += 1
                self.log("GET -> 405 (refused inside the client: this session opens no GET stream)")
                return httpx.Response(405, request=request)
        answer_to: Any = None
        if request.method == "POST":
            try:
                body = json.loads(request.content)
                if "method" in body:
                    label = f"POST {body['method']}" + (f" id={body['id']!r}" if "id" in body else "")
                else:
                    answer_to = body.get("id")
                    label = f"POST response to id={answer_to!r}"
            except Exception:  # noqa: BLE001
                label = "POST ?"
        elif request.method != "GET":
            label = request.method
        resp = await self.inner.handle_async_request(request)
        if answer_to is not None:
            self.wire.answer_http[answer_to] = resp.status_code
        ctype = resp.headers.get("content-type", "")
        self.log(f"{label} -> {resp.status_code} {ctype}")
        if ctype.startswith("text/event-stream") and isinstance(resp.stream, httpx.AsyncByteStream):
            return httpx.Response(
                resp.status_code,
                headers=resp.headers,
                stream=_SseTee(resp.stream, label, self),
                extensions=resp.extensions,
                request=request,
            )
        return resp

    def sse_event(self, label: str, data: str) -> None:
        try:
            msg = json.loads(data)
        except ValueError:
            self.log(f"  SSE on [{label}]: <not JSON> {data[:200]!r}")
            return
        if not isinstance(msg, dict):
            return
        if "method" in msg and "id" in msg:
            self.via[msg["id"]] = label
            what = f"request {msg['method']} id={msg['id']!r}"
        elif "method" in msg:
            what = f"notification {msg['method']}"
        else:
            what = f"response id={msg.get('id')!r}"
        self.log(f"  SSE on [{label}]: {what}")

    async def aclose(self) -> None:
        await self.inner.aclose()


class _SseTee(httpx.AsyncByteStream):
    """Passes an SSE body through unchanged, reporting each event's data to the tap."""

    def __init__(self, inner: httpx.AsyncByteStream, label: str, tap: HttpTap) -> None:
        self.inner = inner
        self.label = label
        self.tap = tap
        self.buf = b""
        self.data: list[bytes] = []

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.buf += chunk
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                line = line.rstrip(b"\r")
                if not line:
                    if self.data:
                        self.tap.sse_event(self.label, b"\n".join(self.data).decode("utf-8", "replace"))
                    self.data = []
                elif line.startswith(b"data:"):
                    d = line[5:]
                    self.data.append(d[1:] if d.startswith(b" ") else d)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextlib.asynccontextmanager
async def open_transport(kind: str, target: str, tap: HttpTap | None = None) -> AsyncIterator[tuple[Any, Any]]:
    if kind == "http":
        # trust_env=False: never route loopback traffic through an env proxy.
        http = httpx.AsyncClient(
            trust_env=False,
            follow_redirects=True,
            timeout=httpx.Timeout(10.0, read=60.0),
            transport=tap,
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


async def run_checks(
    session: ClientSession, r: Runner, obs: Observed, logs: SdkLogCapture, wire: Wire, ans: Answerer
) -> None:
    xp = session.experimental  # ExperimentalClientFeatures
    state: dict[str, Any] = {"created": []}
    label = f"interop-{uuid.uuid4().hex[:8]}"

    async def list_all_tools() -> dict[str, str | None]:
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
        return {t.name: (t.execution.taskSupport if t.execution else None) for t in tools}

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
        got = await list_all_tools()
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

    await run_input_checks(session, r, logs, wire, ans, state, list_all_tools)

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
        late = [b for b in bad if "unknown request ID" in b]
        if r.abandoned and late:  # replies to requests a failed check gave up on
            bad = [b for b in bad if b not in late]
        expect(not bad, f"{len(bad)} rejected inbound message(s), first: {bad[0] if bad else ''}")
        return (
            f"{len(obs.progress)} progress, {len(obs.task_status)} tasks/status, "
            f"{len(obs.other)} other notification(s)/request(s)"
            + (f"; {len(late)} late repl(y/ies) to abandoned requests ignored" if r.abandoned and late else "")
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


async def run_input_checks(
    session: ClientSession,
    r: Runner,
    logs: SdkLogCapture,
    wire: Wire,
    ans: Answerer,
    state: dict[str, Any],
    list_all_tools: Callable[[], Awaitable[dict[str, str | None]]],
) -> None:
    """Input requests inside tasks (2025-11-25 tasks, status input_required): the
    server's tool sends elicitation/create or sampling/createMessage with
    related-task _meta; the SDK's callbacks answer; the task then completes."""
    xp = session.experimental
    tag = uuid.uuid4().hex[:8]

    async def c_input_tools() -> str:
        got = await list_all_tools()
        want = ("confirm_delete", "write_haiku", "multi_input")
        bad = [f"{n}: got {got.get(n, '<tool missing>')!r}, want 'required'" for n in want if got.get(n) != "required"]
        expect(not bad, "; ".join(bad))
        return ", ".join(f"{n}={got[n]}" for n in want)

    await r.check("input tools listed, taskSupport=required", c_input_tools, needs=("initialize",))

    async def create(tool: str, args: dict[str, Any]) -> str:
        ctr = await xp.call_tool_as_task(tool, args, ttl=60_000)
        state["created"].append(ctr.task.taskId)
        return ctr.task.taskId

    def requests_seen(mark: int) -> str:
        reqs = wire.since(mark, ELICIT, SAMPLE)
        return "; ".join(show_request(q) for q in reqs) if reqs else "none"

    async def pending_result(
        tid: str, mark: int, methods: tuple[str, ...], between: Callable[[], Awaitable[None]] | None = None
    ) -> types.CallToolResult:
        """tasks/result for `tid` (it blocks until the task is terminal; the server may
        send its requests on this call's stream). `between` runs while it is pending.
        Fails with a description, not a bare timeout, when no request of `methods`
        arrives within STALL_S, or the result still has not come STALL_S later."""
        box: dict[str, Any] = {}

        def done() -> bool:
            return "res" in box or "exc" in box

        async def fetch() -> None:
            try:
                box["res"] = await xp.get_task_result(tid, types.CallToolResult)
            except Exception as e:  # noqa: BLE001 - re-raised below
                box["exc"] = e
            wire.poke()

        problem: str | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(fetch)
            if between is not None:
                await between()
            if not await wire.wait_until(lambda: done() or bool(wire.since(mark, *methods)), STALL_S):
                problem = f"tasks/result pending and no {' or '.join(methods)} reached the client within {STALL_S:g} s"
            elif not await wire.wait_until(done, STALL_S):
                problem = f"tasks/result still pending {STALL_S:g} s after the server's request(s) arrived"
            if problem:
                r.abandoned += 1
                tg.cancel_scope.cancel()
        if problem:
            st = await xp.get_task(tid)
            answered = {q["id"]: wire.answers.get(q["id"]) for q in wire.since(mark, *methods)}
            raise CheckFailed(
                f"{problem}; tasks/get says {st.status!r}; server requests: {requests_seen(mark)};"
                f" client answers: {json.dumps(answered, default=str)}"
            )
        if "exc" in box:
            raise box["exc"]
        return box["res"]

    def one_answered(mark: int, method: str, txt: str) -> dict[str, Any]:
        """Exactly one `method` request since `mark`, handed to our callback and answered."""
        mine = wire.since(mark, method)
        expect(bool(mine), f"no {method} request reached the client (result text {txt!r})")
        expect(len(mine) == 1, f"{len(mine)} {method} requests, want exactly one: {requests_seen(mark)}")
        problems = sdk_handling_problems(mine[0], ans, wire, logs)
        expect(not problems, "; ".join(problems) + f" -- {show_request(mine[0])}")
        return mine[0]

    # --- confirm_delete, accepted: held back so tasks/get can see input_required ----
    cd: dict[str, Any] = {}
    fn_yes = f"interop-{tag}-yes.txt"

    async def c_confirm_accept() -> str:
        cd["mark"] = mark = len(wire.requests)
        # Spec: responses related to a task MUST carry related-task _meta. The SDK never adds
        # it by itself; this answer does, the other checks answer the way the SDK does by default.
        ans.elicit = lambda p: types.ElicitResult(
            action="accept", content={"confirm": True}, _meta={RELATED_TASK_KEY: {"taskId": cd.get("tid")}}
        )
        wire.hold(ELICIT)
        try:
            tid = cd["tid"] = await create("confirm_delete", {"filename": fn_yes})
            t0 = time.monotonic()
            statuses: list[str] = []
            # 1. poll (tasks/get at the server's pollInterval) until input_required
            async with contextlib.aclosing(xp.poll_task(tid)) as polls:
                async for st in polls:
                    if not statuses or statuses[-1] != st.status:
                        statuses.append(st.status)
                    if st.status == "input_required":
                        cd["input_required_after"] = time.monotonic() - t0
                        break
                    if time.monotonic() - t0 > INPUT_WAIT_S:
                        break
            cd["statuses"] = statuses
            cd["held_then"] = [m.message.root.id for m in wire.held]

            # 2. the spec's next step: tasks/result; the request may come on its stream
            async def release_when_on_wire() -> None:
                await wire.wait_until(lambda: bool(wire.since(mark, ELICIT)), INPUT_WAIT_S)
                wire.release()

            res = await pending_result(tid, mark, (ELICIT,), release_when_on_wire)
        finally:
            wire.release()
            ans.elicit = None
        final = await xp.get_task(tid)
        txt = text_of(res)
        expect(not res.isError, f"isError true: {txt!r}")
        expect(f"Deleted {fn_yes}" in txt, f"text {txt!r} lacks 'Deleted {fn_yes}'")
        expect(final.status == "completed", f"tasks/get after the result: status {final.status!r}")
        return f"text={txt!r}; tasks/get: {status_path(statuses, final.status)}"

    await r.check(
        "confirm_delete accept -> Deleted", c_confirm_accept, timeout=INPUT_CHECK_TIMEOUT_S, needs=("initialize",)
    )

    async def c_input_required() -> str:
        expect("statuses" in cd, "not run: the confirm_delete task was not polled")
        on_wire = [q["id"] for q in wire.since(cd["mark"], ELICIT)]
        if "input_required_after" not in cd:
            raise CheckFailed(
                f"tasks/get never said input_required within {INPUT_WAIT_S:g} s"
                f" (statuses: {' -> '.join(cd['statuses'])}); elicitation/create held unanswered at that point:"
                f" {cd['held_then'] or 'none'}; on the wire by the end: {on_wire or 'none'}"
            )
        held = cd["held_then"]
        return f"after {cd['input_required_after']:.1f} s; " + (
            f"elicitation/create id={held[0]!r} was on the wire, unanswered"
            if held
            else "elicitation/create not sent yet (it came with tasks/result)"
        )

    await r.check("confirm_delete input_required while unanswered", c_input_required, needs=("initialize",))

    async def c_confirm_request() -> str:
        expect("tid" in cd, "not run: no confirm_delete task was created")
        reqs = wire.since(cd["mark"], ELICIT)
        expect(bool(reqs), "no elicitation/create request reached the client")
        expect(
            len(reqs) == 1, f"{len(reqs)} elicitation/create requests, want exactly one: {requests_seen(cd['mark'])}"
        )
        q = reqs[0]
        problems = form_elicitation_problems(q["params"], cd["tid"], {"confirm": "boolean"})
        problems += sdk_handling_problems(q, ans, wire, logs)
        expect(not problems, "; ".join(problems) + f" -- {show_request(q)}")
        return f"id={q['id']!r} message={q['params'].get('message')!r}; answered with related-task _meta"

    await r.check("confirm_delete elicitation/create request", c_confirm_request, needs=("initialize",))

    # --- confirm_delete not confirmed: tasks/result right away, SDK-default answers ----
    async def kept(suffix: str, answer: types.ElicitResult) -> str:
        fn = f"interop-{tag}-{suffix}.txt"
        mark = len(wire.requests)
        ans.elicit = lambda p: answer
        try:
            tid = await create("confirm_delete", {"filename": fn})
            res = await pending_result(tid, mark, (ELICIT,))
        finally:
            ans.elicit = None
        final = await xp.get_task(tid)
        txt = text_of(res)
        q = one_answered(mark, ELICIT, txt)
        expect(not res.isError, f"isError true: {txt!r}")
        expect(f"Kept {fn}" in txt, f"text {txt!r} lacks 'Kept {fn}'")
        expect(final.status == "completed", f"tasks/get after the result: status {final.status!r}")
        return f"text={txt!r}; request id={q['id']!r}"

    await r.check(
        "confirm_delete accept confirm=false -> Kept",
        lambda: kept("false", types.ElicitResult(action="accept", content={"confirm": False})),
        timeout=INPUT_CHECK_TIMEOUT_S,
        needs=("initialize",),
    )
    await r.check(
        "confirm_delete decline -> Kept",
        lambda: kept("decline", types.ElicitResult(action="decline")),
        timeout=INPUT_CHECK_TIMEOUT_S,
        needs=("initialize",),
    )

    # --- write_haiku: sampling, the SDK's documented loop (poll; on input_required, tasks/result)
    hk: dict[str, Any] = {}
    topic = f"interop {tag}"
    haiku = f"Tasks wait in the queue\na canned answer comes back\nrun {tag} is done"

    async def c_haiku() -> str:
        hk["mark"] = mark = len(wire.requests)
        ans.sample = lambda p: types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=haiku),
            model="canned-model",
            stopReason="endTurn",
        )
        try:
            tid = hk["tid"] = await create("write_haiku", {"topic": topic})
            t0 = time.monotonic()
            statuses: list[str] = []
            async with contextlib.aclosing(xp.poll_task(tid)) as polls:
                async for st in polls:
                    if not statuses or statuses[-1] != st.status:
                        statuses.append(st.status)
                    if st.status == "input_required" or time.monotonic() - t0 > INPUT_WAIT_S:
                        break
            res = await pending_result(tid, mark, (SAMPLE,))
        finally:
            ans.sample = None
        final = await xp.get_task(tid)
        txt = text_of(res)
        expect(not res.isError, f"isError true: {txt!r}")
        first = res.content[0] if res.content else None
        expect(isinstance(first, types.TextContent), f"content[0] is {first!r}, want text")
        assert isinstance(first, types.TextContent)
        expect(first.text == haiku, f"content[0].text {first.text!r}, want the sampled text {haiku!r}")
        expect(final.status == "completed", f"tasks/get after the result: status {final.status!r}")
        return f"content[0].text is the canned text; tasks/get: {status_path(statuses, final.status)}"

    await r.check("write_haiku result = sampled text", c_haiku, timeout=INPUT_CHECK_TIMEOUT_S, needs=("initialize",))

    async def c_haiku_request() -> str:
        expect("tid" in hk, "not run: no write_haiku task was created")
        reqs = wire.since(hk["mark"], SAMPLE)
        expect(bool(reqs), "no sampling/createMessage request reached the client")
        expect(len(reqs) == 1, f"{len(reqs)} sampling/createMessage requests, want one: {requests_seen(hk['mark'])}")
        q = reqs[0]
        p = q["params"]
        problems: list[str] = []
        want_text = f"Write a haiku about {topic}."
        msgs = p.get("messages")
        if not isinstance(msgs, list) or not msgs:
            problems.append(f"messages is {msgs!r}")
        else:
            m0 = msgs[0] if isinstance(msgs[0], dict) else {}
            content = m0.get("content")
            block = content[0] if isinstance(content, list) and content else content
            if m0.get("role") != "user":
                problems.append(f"messages[0].role {m0.get('role')!r}, want 'user'")
            if not isinstance(block, dict) or block.get("type") != "text" or block.get("text") != want_text:
                problems.append(f"messages[0].content {content!r}, want text {want_text!r}")
        mt = p.get("maxTokens")
        if not (isinstance(mt, int) and not isinstance(mt, bool) and mt > 0):
            problems.append(f"maxTokens {mt!r}, want a positive integer")
        problems += task_request_problems(p, hk["tid"])
        problems += sdk_handling_problems(q, ans, wire, logs)
        expect(not problems, "; ".join(problems) + f" -- {show_request(q)}")
        return f"id={q['id']!r} maxTokens={mt}; answered {wire.answers[q['id']].get('result')}"

    await r.check("write_haiku sampling/createMessage request", c_haiku_request, needs=("initialize",))

    # --- multi_input: two elicitations at once, both held until both are on the wire ----
    mi: dict[str, Any] = {}
    name_v, color_v = f"Ada-{tag}", f"teal-{tag}"

    def answer_by_schema(p: types.ElicitRequestParams) -> types.ElicitResult:
        schema = getattr(p, "requestedSchema", None) or {}
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        content: dict[str, Any] = {}
        for k, spec in props.items():
            typ = spec.get("type") if isinstance(spec, dict) else None
            if k == "name":
                content[k] = name_v
            elif k == "color":
                content[k] = color_v
            else:
                content[k] = {"boolean": True, "integer": 1, "number": 1}.get(typ, f"{k}-{tag}")
        return types.ElicitResult(action="accept", content=content)

    async def c_multi() -> str:
        mi["mark"] = mark = len(wire.requests)
        ans.elicit = answer_by_schema
        wire.hold(ELICIT)
        try:
            tid = mi["tid"] = await create("multi_input", {})

            async def both_then_release() -> None:
                await wire.wait_until(lambda: len(wire.held) >= 2, INPUT_WAIT_S)
                mi["held"] = [m.message.root.id for m in wire.held]
                mi["status_while_held"] = (await xp.get_task(tid)).status
                wire.release()

            mi["res"] = await pending_result(tid, mark, (ELICIT,), both_then_release)
        finally:
            wire.release()
            ans.elicit = None
        mi["final"] = (await xp.get_task(tid)).status
        held = mi["held"]
        reqs = wire.since(mark, ELICIT)
        expect(
            len(held) >= 2,
            f"only {len(held)} elicitation/create arrived within {INPUT_WAIT_S:g} s while none was answered;"
            f" all of them: " + "; ".join(f"t={q['t']:.2f}s {show_request(q)}" for q in reqs),
        )
        problems: list[str] = []
        asked: list[str] = []
        for q in reqs:
            problems += form_elicitation_problems(q["params"], tid, None)
            problems += sdk_handling_problems(q, ans, wire, logs)
            schema = q["params"].get("requestedSchema") or {}
            asked.extend((schema.get("properties") or {}).keys())
        if sorted(asked) != ["color", "name"]:
            problems.append(f"the requests ask for {asked}, want 'name' and 'color' (one each)")
        expect(not problems, "; ".join(problems) + " -- " + requests_seen(mark))
        return f"ids {held} asked for {asked}; tasks/get while both unanswered: {mi['status_while_held']}"

    await r.check(
        "multi_input two elicitations outstanding at once",
        c_multi,
        timeout=INPUT_CHECK_TIMEOUT_S,
        needs=("initialize",),
    )

    async def c_multi_result() -> str:
        expect("res" in mi, "not run: the multi_input task produced no result")
        res: types.CallToolResult = mi["res"]
        txt = text_of(res)
        expect(not res.isError, f"isError true: {txt!r}")
        missing = [v for v in (name_v, color_v) if v not in txt]
        expect(not missing, f"text {txt!r} lacks {missing}")
        expect(mi["final"] == "completed", f"tasks/get after the result: status {mi['final']!r}")
        return f"text={txt!r}"

    await r.check("multi_input both answers in result", c_multi_result, needs=("initialize",))


@contextlib.asynccontextmanager
async def extra_session(
    kind: str, target: str, wire: Wire, tap: HttpTap | None, r: Runner, what: str, **session_kw: Any
) -> AsyncIterator[ClientSession]:
    """A further connection (a further child process in stdio mode) with its own
    ClientSession. A transport failure is reported as the check's failure (the
    session itself only sees a cancellation)."""
    stack = contextlib.AsyncExitStack()
    failed: BaseException | None = None
    try:
        read, write = await stack.enter_async_context(open_transport(kind, target, tap))
        read2, write2 = await stack.enter_async_context(wire.attach(read, write))
        yield await stack.enter_async_context(ClientSession(read2, write2, **session_kw))
    except BaseException as e:
        failed = e
        raise
    finally:
        try:
            await stack.aclose()
        except Exception as e:  # noqa: BLE001
            if failed is None or isinstance(failed, CheckFailed):
                r.note(f"error while closing the {what}: {describe_exc(e)}")
            else:
                raise CheckFailed(f"{what} failed: {describe_exc(e)}") from None


async def run_nocap_check(kind: str, target: str, r: Runner, trace: TextIO | None) -> None:
    """A second session whose ClientSession has no elicitation/sampling callback, so
    the SDK declares neither capability: confirm_delete must end in an isError
    result, and the server must not send it an elicitation/create."""

    async def body() -> str:
        wire = Wire(trace, tag="[no-elicitation session] ")
        tap = HttpTap(wire) if kind == "http" else None
        async with extra_session(
            kind,
            target,
            wire,
            tap,
            r,
            "no-elicitation session",
            client_info=types.Implementation(name="mcp-tasks-interop-python-nocap", version="0.1.0"),
        ) as s:
            await s.initialize()
            xp = s.experimental
            fn = f"interop-{uuid.uuid4().hex[:8]}-nocap.txt"
            ctr = await xp.call_tool_as_task("confirm_delete", {"filename": fn}, ttl=60_000)
            tid = ctr.task.taskId
            try:
                with anyio.fail_after(STALL_S):
                    res = await xp.get_task_result(tid, types.CallToolResult)
            except TimeoutError:
                r.abandoned += 1
                st = await xp.get_task(tid)
                raise CheckFailed(
                    f"tasks/result still pending after {STALL_S:g} s; tasks/get says {st.status!r};"
                    f" server requests: {'; '.join(map(show_request, wire.requests)) or 'none'}"
                ) from None
            final = await xp.get_task(tid)
        txt = text_of(res)
        sent = wire.since(0, ELICIT, SAMPLE)
        expect(
            not sent,
            "the server sent a request the client has no capability for: " + "; ".join(map(show_request, sent)),
        )
        expect(res.isError is True, f"isError is {res.isError!r}; text {txt!r}")
        return f"text={txt!r}; task {final.status}"

    await r.check(NOCAP_CHECK, body, timeout=NOCAP_TIMEOUT_S)


async def run_noget_check(kind: str, target: str, r: Runner, trace: TextIO | None) -> None:
    """HTTP only: a session that opens no GET stream (the SDK's GET is answered 405
    inside the client). The elicitation then has no stream to go on until the
    client calls tasks/result; it must arrive on that call's SSE response, and the
    result must follow on the same stream once the SDK has answered (by a POST)."""
    if kind != "http":
        r.record(NOGET_CHECK, True, "SKIP stdio has a single stream")
        return

    async def body() -> str:
        tag = "[no-GET session] "
        wire = Wire(trace, tag=tag)
        tap = HttpTap(wire, refuse_get=True)
        ans = Answerer()
        ans.elicit = lambda p: types.ElicitResult(action="accept", content={"confirm": True})
        fn = f"interop-{uuid.uuid4().hex[:8]}-noget.txt"
        statuses: list[str] = []
        async with extra_session(
            kind,
            target,
            wire,
            tap,
            r,
            "no-GET session",
            elicitation_callback=ans.elicitation_callback,
            client_info=types.Implementation(name="mcp-tasks-interop-python-noget", version="0.1.0"),
        ) as s:
            await s.initialize()
            xp = s.experimental
            tid = (await xp.call_tool_as_task("confirm_delete", {"filename": fn}, ttl=60_000)).task.taskId
            t0 = time.monotonic()
            async with contextlib.aclosing(xp.poll_task(tid)) as polls:
                async for st in polls:
                    if not statuses or statuses[-1] != st.status:
                        statuses.append(st.status)
                    if st.status == "input_required" or time.monotonic() - t0 > INPUT_WAIT_S:
                        break
            def seen() -> list[str]:
                return [show_request(q) + f" via [{tap.via.get(q['id'], '?')}]" for q in wire.requests]

            early = seen()
            try:
                with anyio.fail_after(STALL_S):
                    res = await xp.get_task_result(tid, types.CallToolResult)
            except TimeoutError:
                r.abandoned += 1
                st = await xp.get_task(tid)
                raise CheckFailed(
                    f"tasks/result still pending after {STALL_S:g} s; tasks/get says {st.status!r};"
                    f" server requests: {'; '.join(seen()) or 'none'}"
                ) from None
            final = await xp.get_task(tid)
        txt = text_of(res)
        expect(tap.gets_refused > 0, "the SDK never tried to open a GET stream (nothing was refused)")
        expect(not early, "a server request arrived before tasks/result was sent: " + "; ".join(early))
        reqs = wire.since(0, ELICIT)
        expect(len(reqs) == 1, f"{len(reqs)} elicitation/create requests, want one: {'; '.join(seen())}")
        via = tap.via.get(reqs[0]["id"], "?")
        expect(via.startswith("POST tasks/result"), f"elicitation/create came on [{via}], want the tasks/result stream")
        expect(not res.isError, f"isError true: {txt!r}")
        expect(f"Deleted {fn}" in txt, f"text {txt!r} lacks 'Deleted {fn}'")
        expect(final.status == "completed", f"tasks/get after the result: status {final.status!r}")
        path = status_path(statuses, final.status)
        return f"elicitation/create id={reqs[0]['id']!r} came on [{via}]; tasks/get: {path}"

    await r.check(NOGET_CHECK, body, timeout=NOCAP_TIMEOUT_S)


def print_observations(r: Runner, obs: Observed, logs: SdkLogCapture, wire: Wire, tap: HttpTap | None) -> None:
    for q in wire.requests[:20]:
        a = wire.answers.get(q["id"])
        if a is None:
            how = "unanswered"
        else:
            how = f"answered with error {json.dumps(a['error'])}" if "error" in a else "answered"
            if q["id"] in wire.answer_http:
                how += f" (POST -> HTTP {wire.answer_http[q['id']]})"
        via = f" via [{tap.via.get(q['id'], '?')}]" if tap is not None else ""
        r.note(
            f"server request at {q['t']:.2f} s: {q['method']} id={q['id']!r}"
            f" related-task={related_task_of(q['params'].get('_meta'))}{via} {how}"
        )
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
    wire = Wire(trace)
    tap = HttpTap(wire) if kind == "http" else None
    ans = Answerer()
    logging.getLogger().addHandler(logs)
    r.note(f"mcp-tasks interop: official Python SDK mcp {pkg_version('mcp')}, transport={kind}, target={target}")

    fatal: str | None = None
    failure: str | None = None
    try:
        with anyio.fail_after(OVERALL_TIMEOUT_S):
            async with open_transport(kind, target, tap) as (read, write):
                async with wire.attach(read, write) as (read2, write2):
                    # The callbacks make the SDK declare the elicitation (form, url) and
                    # sampling capabilities at initialize.
                    async with ClientSession(
                        read2,
                        write2,
                        message_handler=obs.message_handler,
                        elicitation_callback=ans.elicitation_callback,
                        sampling_callback=ans.sampling_callback,
                        client_info=types.Implementation(name="mcp-tasks-interop-python", version="0.1.0"),
                    ) as session:
                        await run_checks(session, r, obs, logs, wire, ans)
    except TimeoutError:
        failure = f"overall time limit of {OVERALL_TIMEOUT_S:.0f} s reached"
    except BaseException as e:  # noqa: BLE001 - includes ExceptionGroups from the transports
        if isinstance(e, KeyboardInterrupt):
            raise
        failure = describe_exc(e)

    if failure:
        if all(name in r.results for name in MAIN_CHECKS):
            r.note(f"error while closing the session (after all checks ran): {failure}")
        else:
            fatal = f"session with {target} failed: {failure}"
            r.note(fatal)
    for name in MAIN_CHECKS:
        if name not in r.results:
            if fatal is None and not r.passed("initialize"):
                r.record(name, False, "not run: prerequisite 'initialize' did not pass")
            else:
                r.record(name, False, f"not run: {fatal or 'session ended early'}")

    # A second session (a second child process in stdio mode), without callbacks,
    # and a third one (HTTP only) that opens no GET stream.
    for name, fn in ((NOCAP_CHECK, run_nocap_check), (NOGET_CHECK, run_noget_check)):
        try:
            await fn(kind, target, r, trace)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            r.record(name, False, f"session failed: {describe_exc(e)}")
    print_observations(r, obs, logs, wire, tap)

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
