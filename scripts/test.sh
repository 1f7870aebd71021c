#!/usr/bin/env bash
# Runs every test of mcp-tasks. Installs what the interop tests need first (pinned versions):
#   - interop/ts: the official TypeScript SDK v1 client (npm ci from package-lock.json)
#   - interop/ext-tasks: the official MCP Tasks client (@modelcontextprotocol/ext-tasks) on the TypeScript SDK v2 client (npm ci)
#   - interop/ai-sdk: the Vercel AI SDK's MCP client and event receiver (@ai-sdk/mcp, npm ci)
#   - interop/python: the official Python SDK v1 client (a venv from requirements.txt)
#   - conformance: the official MCP conformance suite and Node 22 to run it (npm ci)
#   - interop/rmcp-server: an rmcp 3.11.0 task server for the client's tests (cargo build --locked)
#   - interop/everything: the reference server @modelcontextprotocol/server-everything, which the gateway fronts (npm ci)
#   - interop/ui: playwright-core (npm ci), and Debian's chromium (apt), for the dashboard test
#   - valgrind (Debian package, when missing): the performance guard counts instructions with callgrind
#   - nginx-light (Debian package, when missing): the load balancer in front of three replicas
#   - tmux (Debian package, when missing): the client's terminal tests type into a real terminal
#   - packaging tools (packaging/requirements.txt: wheel, auditwheel, uv, pipx from PyPI, in
#     target/package-tools/venv): scripts/package.sh writes the wheel with them, and the package
#     tests run it with uvx and pipx
#   - a nightly Rust toolchain (rustup, minimal profile) and cargo-fuzz 0.13.2 (cargo install
#     --locked), when missing: the fuzz targets
# then builds every published crate from its .crate file (scripts/package.sh crates), installs the
# binary with `cargo install --path crates/cli` and makes a call through it, runs the Rust test
# suites (unit, property, HTTP/stdio integration, crash, interop, packages) and doc tests, each
# fuzz target for a bounded time (MCP_TASKS_FUZZ_SECS, default 30 s; scripts/fuzz.sh), and a short
# kill -9 soak on SQLite and PostgreSQL (scripts/soak.sh: lost and stuck must be 0).
set -euo pipefail
cd "$(dirname "$0")/.."

stamp() { sha256sum "$@" | sha256sum | cut -d' ' -f1; }
# Each step's heading says when it began (minutes and seconds into the run), so a CI log shows
# where the time goes.
at() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }
run_began=$(date +%s)

# Two builds that none of the installs below needs start at once, in the background, to use the
# CPU the installs leave idle while they wait on the network: clippy, and the fuzz targets'
# nightly build (ten minutes on a fresh two-core machine) at idle priority, so that all through
# the run it gets only the CPU nothing else wants (and has a cargo home of its own: a starved cargo
# holding the shared download cache's lock stalled the others). Their output is shown where their
# step is. (Measured on a fresh two-core machine: 42 min with every step one after the other.)
work_logs=$(mktemp -d)
background=()
# A run that stops early does not leave the background builds running: each is a process group.
trap 'for g in "${background[@]}"; do kill -- "-$g" 2>/dev/null || true; done; rm -rf "$work_logs"' EXIT
# Starts a step in the background in a process group of its own; its output goes to a log.
start_background() {
  local name=$1
  shift
  # Its end is noted (seconds since the epoch) before its exit status, which says it is done.
  setsid bash -c '"$@" >"$0" 2>&1; rc=$?; date +%s >"$0.end"; echo $rc >"$0.rc"' "$work_logs/$name" "$@" &
  background+=($!)
}
# Waits for a background step, shows its output, and fails the run if it failed.
finish_background() {
  local name=$1
  while [ ! -f "$work_logs/$name.rc" ]; do sleep 1; done
  sed 's/^/    /' "$work_logs/$name"
  local ended=$(($(cat "$work_logs/$name.end") - run_began))
  printf '    (%s ended at %dm%02ds)\n' "$name" $((ended / 60)) $((ended % 60))
  if [ "$(cat "$work_logs/$name.rc")" != 0 ]; then
    echo "FAILED: $name" >&2
    exit 1
  fi
}
echo "==> [$(at)] cargo fmt --check; cargo fetch (every download first: the builds that follow, some at once, then only read the download cache and never wait on one another for it)"
cargo fmt --all -- --check
host=$(rustc -vV | sed -n 's/^host: //p')
cargo fetch --locked --target "$host"
cargo fetch --locked --target "$host" --manifest-path interop/rmcp-server/Cargo.toml
echo "==> [$(at)] in the background: cargo clippy, and the fuzz build (scripts/fuzz.sh --build-only, idle priority, its own cargo home)"
start_background clippy cargo clippy --workspace --all-targets -- -D warnings
idle=(nice -n 19)
if command -v chrt >/dev/null 2>&1 && chrt --idle 0 true 2>/dev/null; then idle=(chrt --idle 0 nice -n 19); fi
start_background fuzz-build "${idle[@]}" bash scripts/fuzz.sh --build-only

echo "==> [$(at)] interop/ts: npm ci (TypeScript SDK v1 client)"
ts_stamp=$(stamp interop/ts/package-lock.json)
if [ "$(cat interop/ts/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$ts_stamp" ]; then
  npm ci --prefix interop/ts --no-audit --no-fund --loglevel=error
  echo "$ts_stamp" > interop/ts/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> [$(at)] interop/ext-tasks: npm ci (MCP Tasks client ext-tasks + TypeScript SDK v2 client)"
et_stamp=$(stamp interop/ext-tasks/package-lock.json)
if [ "$(cat interop/ext-tasks/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$et_stamp" ]; then
  npm ci --prefix interop/ext-tasks --no-audit --no-fund --loglevel=error
  echo "$et_stamp" > interop/ext-tasks/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> [$(at)] conformance: npm ci (official MCP conformance suite + Node 22)"
cf_stamp=$(stamp conformance/package-lock.json)
if [ "$(cat conformance/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$cf_stamp" ]; then
  npm ci --prefix conformance --no-audit --no-fund --loglevel=error
  echo "$cf_stamp" > conformance/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> [$(at)] interop/ai-sdk: npm ci (@ai-sdk/mcp 2.0.99: MCP Events client and receiver)"
ai_stamp=$(stamp interop/ai-sdk/package-lock.json)
if [ "$(cat interop/ai-sdk/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$ai_stamp" ]; then
  npm ci --prefix interop/ai-sdk --no-audit --no-fund --loglevel=error
  echo "$ai_stamp" > interop/ai-sdk/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> [$(at)] interop/python: venv (Python SDK v1 client)"
py_stamp=$(stamp interop/python/requirements.txt)
if [ "$(cat interop/python/.venv/.mcp-tasks-stamp 2>/dev/null)" != "$py_stamp" ]; then
  rm -rf interop/python/.venv
  python3 -m venv interop/python/.venv
  interop/python/.venv/bin/pip install --quiet --disable-pip-version-check -r interop/python/requirements.txt
  echo "$py_stamp" > interop/python/.venv/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> [$(at)] interop/everything: npm ci (server-everything, the upstream of the gateway tests)"
ev_stamp=$(stamp interop/everything/package-lock.json)
if [ "$(cat interop/everything/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$ev_stamp" ]; then
  npm ci --prefix interop/everything --no-audit --no-fund --loglevel=error
  echo "$ev_stamp" > interop/everything/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> [$(at)] interop/rmcp-server: cargo build --locked (rmcp 3.11.0 task server the client is tested against)"
export MCP_TASKS_INTEROP_TARGET="${MCP_TASKS_INTEROP_TARGET:-$HOME/.cache/mcp-tasks/interop-target}"
CARGO_TARGET_DIR="$MCP_TASKS_INTEROP_TARGET" cargo build --quiet --locked --manifest-path interop/rmcp-server/Cargo.toml

echo "==> [$(at)] valgrind (the performance guard counts instructions with callgrind)"
if command -v valgrind >/dev/null 2>&1; then
  echo "    $(valgrind --version)"
else
  echo "    installing Debian's valgrind"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; else sudo apt-get update -qq && sudo apt-get install -y -qq valgrind >/dev/null; fi
fi

echo "==> [$(at)] nginx (the three-replica tests put nginx in front of the replicas)"
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

echo "==> [$(at)] tmux (the client's terminal tests run mcp-tasks call in a real terminal)"
if command -v tmux >/dev/null 2>&1; then
  echo "    $(tmux -V)"
else
  echo "    installing Debian's tmux (3.3a-3)"
  run_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  run_root apt-get update -qq
  run_root apt-get install -y -qq tmux=3.3a-3 >/dev/null 2>&1 || run_root apt-get install -y -qq tmux >/dev/null
  echo "    $(tmux -V)"
fi

echo "==> [$(at)] chromium (the dashboard test drives it headless with playwright-core)"
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

echo "==> [$(at)] interop/ui: npm ci (playwright-core, to drive the dashboard; no browser download)"
ui_stamp=$(stamp interop/ui/package-lock.json)
if [ "$(cat interop/ui/node_modules/.mcp-tasks-stamp 2>/dev/null)" != "$ui_stamp" ]; then
  npm ci --prefix interop/ui --no-audit --no-fund --loglevel=error
  echo "$ui_stamp" > interop/ui/node_modules/.mcp-tasks-stamp
else
  echo "    up to date"
fi

echo "==> [$(at)] packaging tools: $(grep -v '^#' packaging/requirements.txt | xargs) (PyPI; scripts/package.sh writes and tags the wheel with them)"
bash scripts/package.sh tools

echo "==> [$(at)] cargo fmt --check (done first) and clippy (warnings are errors; started at the beginning)"
finish_background clippy

# Before the suites: these builds write target/debug/mcp-tasks too, and the suites' build puts the
# workspace's own back.
echo "==> [$(at)] crates: every published crate packaged, and the .crate files built together (scripts/package.sh crates)"
bash scripts/package.sh crates

echo "==> [$(at)] cargo install --path crates/cli (dev profile, into a scratch root), then a call through what it installed"
install_root="${CARGO_TARGET_DIR:-target}/install-check"
rm -rf "$install_root"
cargo install --quiet --locked --debug --path crates/cli --root "$install_root"
"$install_root/bin/mcp-tasks" --version
MCP_TASKS_LOG=warn RUST_LOG=warn "$install_root/bin/mcp-tasks" call \
  --stdio "$install_root/bin/mcp-tasks serve --stdio --demo --store memory:" greet name=cargo-install \
  | grep -qx 'Hello, cargo-install!'
echo "    ok: the installed mcp-tasks answered a call"

echo "==> [$(at)] cargo tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
  cargo test --workspace --doc
else
  cargo test --workspace --no-fail-fast
fi

echo "==> [$(at)] fuzz targets, ${MCP_TASKS_FUZZ_SECS:-30} s each (scripts/fuzz.sh; its build started at the beginning)"
finish_background fuzz-build
bash scripts/fuzz.sh "${MCP_TASKS_FUZZ_SECS:-30}"

echo "==> [$(at)] kill -9 soak, 3 cycles per store (scripts/soak.sh)"
bash scripts/soak.sh --cycles 3 --cycle-secs 5 --settle-secs 90

echo "==> [$(at)] all tests passed"
