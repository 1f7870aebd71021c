#!/usr/bin/env bash
# What a command tool that floods `::progress` lines costs the server: starts `mcp-tasks serve` with a
# tool printing N progress lines as fast as it can, calls it as a task, and prints the server's CPU
# time (user + system, from /proc) for the whole call and per 100k lines, and how long after the
# program ended the task was finished.
#
# Usage: scripts/bench-progress-flood.sh [BINARY] [LINES] [STORE]
#   BINARY  mcp-tasks binary (default target/release/mcp-tasks)
#   LINES   progress lines the tool prints (default 200000)
#   STORE   memory: or sqlite://PATH (default memory:)
set -euo pipefail
bin=${1:-target/release/mcp-tasks}
lines=${2:-200000}
store=${3:-memory:}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
cat > "$dir/flood.sh" <<SH
awk 'BEGIN { for (i = 1; i <= $lines; i++) print "::progress " i "/$lines" }'
date +%s.%N
SH
cat > "$dir/flood.toml" <<TOML
[[tools]]
name = "flood"
description = "Prints $lines progress lines as fast as it can, then the time it finished."
command = ["sh", "$dir/flood.sh"]
task_support = "optional"
TOML
"$bin" serve --store "$store" --listen 127.0.0.1:0 --config "$dir/flood.toml" > "$dir/out" 2> "$dir/err" &
pid=$!
for _ in $(seq 1 100); do grep -q "listening on" "$dir/out" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$dir/out")
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
before=$(ticks)
start=$(date +%s.%N)
ended=$("$bin" call --url "$url" --quiet flood | tail -n 1)
finished=$(date +%s.%N)
after=$(ticks)
awk -v l="$lines" -v s="$store" -v b="$before" -v a="$after" -v hz="$hz" -v t0="$start" -v t1="$finished" -v e="$ended" 'BEGIN {
  cpu = (a - b) / hz
  printf "lines: %d  store: %s\n", l, s
  printf "server CPU: %.2f s (%.2f s per 100k lines)\n", cpu, cpu * 100000 / l
  printf "call: %.2f s; result %.2f s after the program ended\n", t1 - t0, t1 - e
}'
