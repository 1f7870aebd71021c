"""An MCP server written with the official Python SDK v1 (mcp 1.29.1, FastMCP), served over
Streamable HTTP on a loopback port: the upstream the gateway tests put mcp-tasks in front of.

Usage: upstream_server.py MARKER_DIR [--stdio]
Prints "listening on http://127.0.0.1:PORT/mcp" as its first line, then serves until killed; with
--stdio it serves one client on stdin/stdout instead (what `mcp-tasks wrap -- …` starts).
Tools:
  count(n, delay)      reports progress n times (one step each `delay` seconds), logs each step
  ask_name()           asks for a name by elicitation, answers "hello NAME" (or how it was refused)
  wait(seconds)        sleeps; when cancelled it writes MARKER_DIR/cancelled before it stops
  add_late_tool()      adds the tool `late` and announces notifications/tools/list_changed
Resource info://about (text), prompt greet(name).
With --stdio, a SIGTERM leaves MARKER_DIR/sigterm-PID before the process ends.
"""

import os
import signal
import socket
import sys
from pathlib import Path

import anyio
import uvicorn
from pydantic import BaseModel

from mcp.server.fastmcp import Context, FastMCP

marker_dir = Path(sys.argv[1])
mcp = FastMCP("python-upstream")


@mcp.tool(description="Counts to n, one step every `delay` seconds, reporting progress.")
async def count(n: int, ctx: Context, delay: float = 0.2) -> str:
    for i in range(1, n + 1):
        await anyio.sleep(delay)
        await ctx.report_progress(i, n, f"step {i} of {n}")
        await ctx.info(f"counted {i}")
    return f"counted to {n}"


class Name(BaseModel):
    name: str


@mcp.tool(description="Asks the user for a name and greets them.")
async def ask_name(ctx: Context) -> str:
    answer = await ctx.elicit(message="What is your name?", schema=Name)
    if answer.action == "accept" and answer.data is not None:
        return f"hello {answer.data.name}"
    return f"no name ({answer.action})"


@mcp.tool(description="Sleeps for `seconds`; a cancel leaves a marker file behind.")
async def wait(seconds: float) -> str:
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        (marker_dir / "cancelled").write_text("cancelled\n")
        raise
    return f"waited {seconds} s"


@mcp.tool(description="Adds the tool `late` and tells the client the tool list changed.")
async def add_late_tool(ctx: Context) -> str:
    def late() -> str:
        """A tool that was added while the server ran."""
        return "late tool ran"

    mcp.add_tool(late, name="late")
    await ctx.session.send_tool_list_changed()
    return "added late"


@mcp.resource("info://about", mime_type="text/plain")
def about() -> str:
    """What this server is."""
    return "a FastMCP upstream"


@mcp.prompt()
def greet(name: str) -> str:
    """Greets someone."""
    return f"Please greet {name} warmly."


def leave_a_marker_on_sigterm() -> None:
    """A SIGTERM writes MARKER_DIR/sigterm-PID, then ends the process as SIGTERM would: a test can
    tell that a signal meant for the gateway (a host stopping its process group) reached us."""

    def on_term(signum: int, _frame: object) -> None:
        (marker_dir / f"sigterm-{os.getpid()}").write_text("sigterm\n")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_term)


def main() -> None:
    if "--stdio" in sys.argv[2:]:
        leave_a_marker_on_sigterm()
        mcp.run("stdio")
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # Listening before the URL is printed: a client that connects at once is queued, not refused.
    sock.listen(128)
    config = uvicorn.Config(mcp.streamable_http_app(), log_level="warning")
    server = uvicorn.Server(config)
    print(f"listening on http://127.0.0.1:{port}/mcp", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
