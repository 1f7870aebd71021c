#!/usr/bin/env bash
# What large task arguments cost the server in memory: starts `mcp-tasks serve` with a command tool
# that runs ~30 s reporting progress 5 times a second, starts TASKS tasks of it with MIB MiB of
# arguments each (2026-07-28 wire), and prints the server's RSS (from /proc) before, while they run,
# and after they are cancelled, with the growth per MiB of arguments.
#
# Usage: scripts/bench-argument-memory.sh [BINARY] [STORE] [TASKS] [MIB]
#   BINARY  mcp-tasks binary (default target/release/mcp-tasks)
#   STORE   memory: or sqlite://PATH (default memory:)
#   TASKS   tasks started (default 20)
#   MIB     MiB of arguments per task (default 3; the server's body limit is raised to fit them)
set -euo pipefail
bin=${1:-target/release/mcp-tasks}
store=${2:-memory:}
tasks=${3:-20}
mib=${4:-3}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
# The request body holds the arguments and the envelope: allow a MiB more than the arguments.
body=$(python3 -c "print(int(($mib + 1) * 1024 * 1024))")
# Room for every task's arguments under the running-bytes cap (64 MiB by default).
held=$(python3 -c "print(int(($mib + 1) * 1024 * 1024 * $tasks))")
cat > "$dir/hold.toml" <<TOML
[server]
max_body_bytes = $body
[auth]
anonymous_max_running_tasks = 1000
anonymous_max_running_bytes = $held
[[tools]]
name = "hold"
description = "Runs about 30 s, reporting progress 5 times a second; ignores its arguments."
command = ["sh", "-c", "i=0; while [ \$i -lt 150 ]; do i=\$((i+1)); echo \"::progress \$i/150\"; sleep 0.2; done"]
task_support = "optional"
TOML
"$bin" serve --store "$store" --listen 127.0.0.1:0 --config "$dir/hold.toml" > "$dir/out" 2> "$dir/err" &
pid=$!
for _ in $(seq 1 100); do grep -q "listening on" "$dir/out" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$dir/out")
python3 - "$url" "$pid" "$tasks" "$mib" <<'PY'
import json, sys, time, urllib.request
url, pid, tasks, mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
V = "2026-07-28"
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
def call(method, params, name=None):
    params["_meta"] = {"io.modelcontextprotocol/protocolVersion": V,
                       "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                       "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": V, "mcp-method": method}
    if name:
        headers["mcp-name"] = name
    req = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read().decode()
    if not raw.lstrip().startswith("{"):
        # A server that streams its answer (text/event-stream): the response is the data line
        # that carries the request's id.
        messages = [json.loads(l[5:]) for l in raw.splitlines() if l.startswith("data:")]
        return next(m for m in messages if m.get("id") == 1)
    return json.loads(raw)
time.sleep(1)
base = rss()
data = "x" * int(mib * 1024 * 1024 - 64)
ids = []
for i in range(tasks):
    r = call("tools/call", {"name": "hold", "arguments": {"data": data, "n": i}}, "hold")
    if "result" not in r:
        sys.exit(f"task {i} refused: {r}")
    ids.append(r["result"]["taskId"])
time.sleep(5)
running = rss()
for t in ids:
    call("tasks/cancel", {"taskId": t}, t)
time.sleep(5)
after = rss()
args = tasks * mib
print(f"tasks: {tasks} x {mib:g} MiB of arguments ({args:g} MiB)")
print(f"RSS: {base:.0f} MiB at start, {running:.0f} MiB while running, {after:.0f} MiB 5 s after cancelling")
print(f"growth per MiB of arguments: {(running - base) / args:.2f} MiB while running, {(after - base) / args:.2f} MiB after")
PY
