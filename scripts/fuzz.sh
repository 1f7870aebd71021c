#!/usr/bin/env bash
# Runs the fuzz targets (fuzz/fuzz_targets, cargo fuzz on libFuzzer) for a bounded time each.
#
#   scripts/fuzz.sh                 every target, 30 s each (what the test command runs)
#   scripts/fuzz.sh 600 wire        one target, ten minutes
#   scripts/fuzz.sh --keep 600      every target; new inputs that add coverage are merged into
#                                   fuzz/corpus/<target>.tar.gz (commit it)
#   scripts/fuzz.sh --build-only    installs what is missing and builds the targets, runs nothing
#                                   (the test command starts this early, in the background)
#
# Targets: jsonrpc (the JSON-RPC parser, round trip), era (the header/body facts and the wire-form
# classifier), wire (one POST through the HTTP router on each wire: header checks, parsing, each
# wire's params). A crash stops the run with exit 1; its input is kept in
# $MCP_TASKS_FUZZ_TARGET/fuzz-artifacts/<target>/ (~/.cache/mcp-tasks/fuzz-target) and printed; replay it with
#   cargo +nightly fuzz run --fuzz-dir fuzz --sanitizer none --debug-assertions <target> <file>
#
# Installs what it needs when missing: a nightly toolchain (rustup, minimal profile) and cargo-fuzz
# 0.13.2 (cargo install --locked, into its own cargo home: $MCP_TASKS_FUZZ_CARGO_HOME, else
# cargo-home/ in the build directory).
set -euo pipefail
cd "$(dirname "$0")/.."

keep=false
build_only=false
if [ "${1:-}" = "--keep" ]; then keep=true; shift; fi
if [ "${1:-}" = "--build-only" ]; then build_only=true; shift; fi
secs="${1:-${MCP_TASKS_FUZZ_SECS:-30}}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(jsonrpc era wire); fi

# A build directory of its own: nightly, sanitizer flags, and no wait on the tests' build lock.
target_dir="${MCP_TASKS_FUZZ_TARGET:-$HOME/.cache/mcp-tasks/fuzz-target}"
export CARGO_TARGET_DIR="$target_dir"
# And a cargo home of its own (its download cache, and cargo-fuzz): the test command builds the
# fuzz targets at idle priority beside its other builds, and a starved cargo holding the shared
# download cache's lock would stall every other cargo waiting to download.
export CARGO_HOME="${MCP_TASKS_FUZZ_CARGO_HOME:-$target_dir/cargo-home}"
export PATH="$CARGO_HOME/bin:$PATH"
mkdir -p "$CARGO_HOME"

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "    installing the nightly toolchain (minimal profile)"
  rustup toolchain install nightly --profile minimal
fi
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz 0.13.2" ]; then
  echo "    installing cargo-fuzz 0.13.2"
  cargo install cargo-fuzz --version 0.13.2 --locked --quiet
fi

# No sanitizer: the project's crates forbid unsafe code, and the address sanitizer doubled the build
# (15 min cold) for the dependencies' unsafe code, which their own fuzzing covers. Debug assertions
# on: an overflow is a crash.
flags=(--fuzz-dir fuzz --sanitizer none --debug-assertions)
echo "==> cargo +nightly fuzz build (release, debug assertions)"
CARGO_TERM_QUIET=true cargo +nightly fuzz build "${flags[@]}"
if $build_only; then exit 0; fi

status=0
for t in "${targets[@]}"; do
  work=$(mktemp -d)
  corpus="$work/corpus"
  mkdir -p "$corpus" "$work/new"
  # The corpus grown by earlier runs is one archive per target (a few thousand small inputs);
  # the hand-written seeds are readable files beside it.
  if [ -f "fuzz/corpus/$t.tar.gz" ]; then tar -xzf "fuzz/corpus/$t.tar.gz" -C "$corpus"; fi
  artifacts="$target_dir/fuzz-artifacts/$t"
  mkdir -p "$artifacts"
  echo "==> fuzz $t for ${secs}s (corpus: $(ls "$corpus" | wc -l) inputs, seeds: $(ls "fuzz/seeds/$t" | wc -l))"
  # New inputs go to the scratch directory (the first one); the committed ones are only read.
  if cargo +nightly fuzz run "${flags[@]}" "$t" "$work/new" "$corpus" "fuzz/seeds/$t" -- \
      -max_total_time="$secs" -artifact_prefix="$artifacts/" -print_final_stats=1 \
      -rss_limit_mb=4096 -timeout=20 >"$work/log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$work/log" \
      | sed 's/^/    /'
    grep -E '#[0-9]+.*DONE' "$work/log" | tail -1 | sed 's/^/    /'
    if $keep; then
      cargo +nightly fuzz run "${flags[@]}" "$t" "$corpus" "$work/new" -- -merge=1 >/dev/null 2>&1
      (cd "$corpus" && ls | LC_ALL=C sort \
        | tar --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - -T - | gzip -9n) \
        > "fuzz/corpus/$t.tar.gz"
      echo "    corpus now $(ls "$corpus" | wc -l) inputs (fuzz/corpus/$t.tar.gz)"
    fi
  else
    status=1
    echo "    FAILED: $t"
    grep -E 'ERROR|panicked|SUMMARY|Test unit written|artifact' "$work/log" | head -20 | sed 's/^/    /'
    tail -40 "$work/log" | sed 's/^/    | /'
  fi
  rm -rf "$work"
done
exit $status
