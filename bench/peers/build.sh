#!/usr/bin/env bash
# Installs and builds the benchmark's peer servers, then prints the command that starts each:
#   ts-sdk-v1  the official TypeScript SDK v1 (npm ci from ts-sdk-v1/package-lock.json)
#   rmcp       rmcp 3 (cargo build --release --locked in rmcp/, its own workspace and Cargo.lock)
#   turul-*    turul-mcp-framework 0.4.5 (cargo build --release --locked in turul/, its own workspace
#              and Cargo.lock; one binary per wire, each on an in-memory or a SQLite task store)
#
# Usage: bench/peers/build.sh
#   CARGO_TARGET_DIR  where the Rust peers are built (default $HOME/.cache/mcp-tasks/peers-target)
#   NODE              the node to use (default: node on PATH; needs >= 20)
# Idempotent: npm ci runs only when package-lock.json (or the node version) changed since the last
# install; cargo does nothing when nothing changed. Build output goes to stderr; stdout is exactly
#   ts-sdk-v1: <command>
#   rmcp: <command>
#   turul-memory-2025: <command>
#   turul-sqlite-2025: <command>
#   turul-memory-2026: <command>
#   turul-sqlite-2026: <command>
# Each command takes [--port N] (0 or absent: ephemeral) and prints
# `listening on http://127.0.0.1:PORT/mcp` as its first line. ts-sdk-v1 and rmcp also take [--json];
# the turul SQLite ones take [--db PATH] (default: a fresh file in the temp directory).
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
# Run from a program that `cargo run` started (the bench suite), this script inherits that package's
# CARGO_PKG_*, CARGO_MANIFEST_* and the like. Build scripts that watch them (ring's does, through
# rerun-if-env-changed) would then rerun, and everything above them rebuild, whenever the caller
# changes: drop them so every caller builds in the same environment.
while IFS= read -r var; do
    case "$var" in
        CARGO_PKG_*|CARGO_MANIFEST_*|CARGO_CRATE_NAME|CARGO_BIN_NAME|CARGO_PRIMARY_PACKAGE|CARGO_TARGET_TMPDIR)
            unset "$var" ;;
    esac
done < <(compgen -e)

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

# turul: one package per wire, built one at a time (its two protocol features exclude each other,
# so building both packages in one cargo invocation would unify them and fail).
for wire in 2025 2026; do
    echo "build.sh: cargo build --release --locked -p mcp-peer-turul-$wire in $here/turul" >&2
    (cd "$here/turul" && cargo build --release --locked --quiet -p "mcp-peer-turul-$wire") >&2
done

rmcp_bin="$CARGO_TARGET_DIR/release/mcp-peer-rmcp"
[ -x "$rmcp_bin" ] || { echo "build.sh: $rmcp_bin was not built" >&2; exit 1; }
for wire in 2025 2026; do
    bin="$CARGO_TARGET_DIR/release/mcp-peer-turul-$wire"
    [ -x "$bin" ] || { echo "build.sh: $bin was not built" >&2; exit 1; }
done
echo "ts-sdk-v1: $(command -v "$node") $ts/server.mjs"
echo "rmcp: $rmcp_bin"
for wire in 2025 2026; do
    for store in memory sqlite; do
        echo "turul-$store-$wire: $CARGO_TARGET_DIR/release/mcp-peer-turul-$wire --store $store"
    done
done
