#!/usr/bin/env bash
# Installs and builds the benchmark's peer servers, then prints the command that starts each:
#   ts-sdk-v1  the official TypeScript SDK v1 (npm ci from ts-sdk-v1/package-lock.json)
#   rmcp       rmcp 3 (cargo build --release --locked in rmcp/, its own workspace and Cargo.lock)
#
# Usage: bench/peers/build.sh
#   CARGO_TARGET_DIR  where the rmcp peer is built (default $HOME/.cache/mcp-tasks/peers-target)
#   NODE              the node to use (default: node on PATH; needs >= 20)
# Idempotent: npm ci runs only when package-lock.json (or the node version) changed since the last
# install; cargo does nothing when nothing changed. Build output goes to stderr; stdout is exactly
#   ts-sdk-v1: <command>
#   rmcp: <command>
# Each command takes [--port N] (0 or absent: ephemeral) and [--json], and prints
# `listening on http://127.0.0.1:PORT/mcp` as its first line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
node="${NODE:-node}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/mcp-tasks/peers-target}"

command -v "$node" >/dev/null || { echo "build.sh: $node not found (Node >= 20 needed)" >&2; exit 1; }
node_version="$("$node" --version)"
node_major="${node_version#v}"; node_major="${node_major%%.*}"
if [ "$node_major" -lt 20 ]; then
    echo "build.sh: Node >= 20 needed, found $node_version" >&2
    exit 1
fi
command -v cargo >/dev/null || { echo "build.sh: cargo not found" >&2; exit 1; }

# ts-sdk-v1: npm ci from the lockfile, skipped when the installed tree came from this very lockfile.
ts="$here/ts-sdk-v1"
stamp="$ts/node_modules/.mcp-tasks-peer-stamp"
want="$(sha256sum "$ts/package-lock.json" | cut -d' ' -f1) $node_version"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "build.sh: npm ci in $ts" >&2
    (cd "$ts" && npm ci --no-audit --no-fund --loglevel=error) >&2
    echo "$want" > "$stamp"
fi

# rmcp: cargo is its own cache.
echo "build.sh: cargo build --release --locked in $here/rmcp (target: $CARGO_TARGET_DIR)" >&2
(cd "$here/rmcp" && cargo build --release --locked --quiet) >&2

rmcp_bin="$CARGO_TARGET_DIR/release/mcp-peer-rmcp"
[ -x "$rmcp_bin" ] || { echo "build.sh: $rmcp_bin was not built" >&2; exit 1; }
echo "ts-sdk-v1: $(command -v "$node") $ts/server.mjs"
echo "rmcp: $rmcp_bin"
