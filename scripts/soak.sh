#!/usr/bin/env bash
# The kill -9 soak: `mcp-tasks serve --demo` is killed with SIGKILL again and again under a mixed
# load (clients on both wires creating tasks of 0-3 s, cancelling some, reading some, making plain
# calls), on SQLite and on PostgreSQL, then restarted once more and asked for every task it
# acknowledged. It prints, per store, the kills and the acknowledged / found / lost / stuck counts,
# and exits 1 unless lost and stuck are both 0. Loopback only; bounded by its arguments.
#
#   scripts/soak.sh                              5 cycles of 6 s per store (about 2 minutes)
#   scripts/soak.sh --cycles 50 --cycle-secs 10  longer
#   scripts/soak.sh --stores sqlite --clients 32
#
# Every flag goes to `mcp-tasks-bench soak` (see its --help). PostgreSQL: MCP_TASKS_TEST_PG, else
# 127.0.0.1:5432/test, in a fresh schema that is dropped at the end. SOAK_PROFILE=release builds
# optimised binaries first.
set -euo pipefail
cd "$(dirname "$0")/.."

profile="${SOAK_PROFILE:-dev}"
dir=debug
if [ "$profile" = release ]; then dir=release; fi
echo "==> cargo build --profile $profile -p mcp-tasks -p mcp-tasks-bench"
cargo build --quiet --profile "$profile" -p mcp-tasks -p mcp-tasks-bench
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
echo "==> soak"
exec "$target_dir/$dir/mcp-tasks-bench" soak --server "$target_dir/$dir/mcp-tasks" "$@"
