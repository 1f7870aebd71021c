#!/usr/bin/env bash
# Runs every test of mcp-tasks. Installs what the interop tests need first (pinned versions):
#   - interop/ts: the official TypeScript SDK v1 client (npm ci from package-lock.json)
#   - interop/ext-tasks: the official MCP Tasks client (@modelcontextprotocol/ext-tasks) on the TypeScript SDK v2 client (npm ci)
#   - interop/python: the official Python SDK v1 client (a venv from requirements.txt)
#   - conformance: the official MCP conformance suite and Node 22 to run it (npm ci)
#   - interop/rmcp-server: an rmcp 3.11.0 task server for the client's tests (cargo build --locked)
#   - interop/everything: the reference server @modelcontextprotocol/server-everything, which the gateway fronts (npm ci)
#   - interop/ui: playwright-core (npm ci), and Debian's chromium (apt), for the dashboard test
#   - valgrind (Debian package, when missing): the performance guard counts instructions with callgrind
#   - nginx-light (Debian package, when missing): the load balancer in front of three replicas
#   - tmux (Debian package, when missing): the client's terminal tests type into a real terminal
#   - a nightly Rust toolchain (rustup, minimal profile) and cargo-fuzz 0.13.2 (cargo install
#     --locked), when missing: the fuzz targets
# then runs the Rust test suites (unit, property, HTTP/stdio integration, crash, interop) and doc
# tests, each fuzz target for a bounded time (MCP_TASKS_FUZZ_SECS, default 30 s; scripts/fuzz.sh),
# and a short kill -9 soak on SQLite and PostgreSQL (scripts/soak.sh: lost and stuck must be 0).
set -euo pipefail
cd "$(dirname "$0")/.."

stamp() { sha256sum "$@" | sha256sum | cut -d' ' -f1; }

echo "==> interop/ts: npm ci (TypeScript SDK v1 client)"
ts_stamp=$(stamp interop/ts/package-lock.json)
if [ "$(cat interop/ts/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$ts_stamp" ]; then
  npm ci --prefix interop/ts --no-audit --no-fund --loglevel=error
  echo "$ts_stamp" > interop/ts/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> interop/ext-tasks: npm ci (MCP Tasks client ext-tasks + TypeScript SDK v2 client)"
et_stamp=$(stamp interop/ext-tasks/package-lock.json)
if [ "$(cat interop/ext-tasks/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$et_stamp" ]; then
  npm ci --prefix interop/ext-tasks --no-audit --no-fund --loglevel=error
  echo "$et_stamp" > interop/ext-tasks/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> conformance: npm ci (official MCP conformance suite + Node 22)"
cf_stamp=$(stamp conformance/package-lock.json)
if [ "$(cat conformance/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$cf_stamp" ]; then
  npm ci --prefix conformance --no-audit --no-fund --loglevel=error
  echo "$cf_stamp" > conformance/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> interop/python: venv (Python SDK v1 client)"
py_stamp=$(stamp interop/python/requirements.txt)
if [ "$(cat interop/python/.venv/.mcp-tasks-stamp 2>/dev/null)" != "$py_stamp" ]; then
  rm -rf interop/python/.venv
  python3 -m venv interop/python/.venv
  interop/python/.venv/bin/pip install --quiet --disable-pip-version-check -r interop/python/requirements.txt
  echo "$py_stamp" > interop/python/.venv/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> interop/everything: npm ci (server-everything, the upstream of the gateway tests)"
ev_stamp=$(stamp interop/everything/package-lock.json)
if [ "$(cat interop/everything/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$ev_stamp" ]; then
  npm ci --prefix interop/everything --no-audit --no-fund --loglevel=error
  echo "$ev_stamp" > interop/everything/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> interop/rmcp-server: cargo build --locked (rmcp 3.11.0 task server the client is tested against)"
export MCP_TASKS_INTEROP_TARGET="${MCP_TASKS_INTEROP_TARGET:-$HOME/.cache/mcp-tasks/interop-target}"
CARGO_TARGET_DIR="$MCP_TASKS_INTEROP_TARGET" cargo build --quiet --locked --manifest-path interop/rmcp-server/Cargo.toml

echo "==> valgrind (the performance guard counts instructions with callgrind)"
if command -v valgrind >/dev/null 2>&1; then
  echo "    $(valgrind --version)"
else
  echo "    installing Debian's valgrind"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; else sudo apt-get update -qq && sudo apt-get install -y -qq valgrind >/dev/null; fi
fi

echo "==> nginx (the three-replica tests put nginx in front of the replicas)"
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  echo "    $(PATH="$PATH:/usr/sbin" nginx -v 2>&1)"
else
  # Debian 12's nginx-light; the exact version first, the archive's current one when that was replaced.
  echo "    installing Debian's nginx-light (1.22.1-9+deb12u11)"
  run_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  run_root apt-get update -qq
  run_root apt-get install -y -qq nginx-light=1.22.1-9+deb12u11 >/dev/null 2>&1 \
    || run_root apt-get install -y -qq nginx-light >/dev/null
  echo "    $(PATH="$PATH:/usr/sbin" nginx -v 2>&1)"
fi

echo "==> tmux (the client's terminal tests run mcp-tasks call in a real terminal)"
if command -v tmux >/dev/null 2>&1; then
  echo "    $(tmux -V)"
else
  echo "    installing Debian's tmux (3.3a-3)"
  run_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  run_root apt-get update -qq
  run_root apt-get install -y -qq tmux=3.3a-3 >/dev/null 2>&1 || run_root apt-get install -y -qq tmux >/dev/null
  echo "    $(tmux -V)"
fi

echo "==> chromium (the dashboard test drives it headless with playwright-core)"
if [ -x /usr/bin/chromium ]; then
  echo "    $(/usr/bin/chromium --version 2>/dev/null)"
else
  echo "    installing Debian's chromium (156.0.8078.79-1~deb12u1)"
  run_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  run_root apt-get update -qq
  run_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium=156.0.8078.79-1~deb12u1 >/dev/null 2>&1 \
    || run_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  echo "    $(/usr/bin/chromium --version 2>/dev/null)"
fi

echo "==> interop/ui: npm ci (playwright-core, to drive the dashboard; no browser download)"
ui_stamp=$(stamp interop/ui/package-lock.json)
if [ "$(cat interop/ui/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$ui_stamp" ]; then
  npm ci --prefix interop/ui --no-audit --no-fund --loglevel=error
  echo "$ui_stamp" > interop/ui/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> cargo fmt --check and clippy (warnings are errors)"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "==> cargo tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
  cargo test --workspace --doc
else
  cargo test --workspace --no-fail-fast
fi

echo "==> fuzz targets, ${MCP_TASKS_FUZZ_SECS:-30} s each (scripts/fuzz.sh)"
bash scripts/fuzz.sh "${MCP_TASKS_FUZZ_SECS:-30}"

echo "==> kill -9 soak, 3 cycles per store (scripts/soak.sh)"
bash scripts/soak.sh --cycles 3 --cycle-secs 5 --settle-secs 90
