#!/usr/bin/env bash
# Builds the packages of mcp-tasks into target/packages/ (publishing them is a person's step:
# docs/releasing.md):
#   wheel    mcp_tasks-VERSION-py3-none-PLATFORM.whl: the binary and its man pages, for
#            `pip install mcp-tasks`, `pipx run mcp-tasks`, `uvx mcp-tasks` (packaging/wheel.py)
#   npm      npm/mcp-tasks-VERSION.tgz (the launcher, `npx mcp-tasks`) and
#            npm/mcp-tasks-PLATFORM-VERSION.tgz (@mcp-tasks/PLATFORM, the binary) (packaging/npm/build.mjs)
#   crates   crates/*.crate: every published crate (cargo package), verified by building the .crate
#            files together, each dependency on a sibling resolved to the sibling's .crate
#   tools    only install the packaging tools (below)
# With no kind, all three are built.
#
# Options:
#   --binary PATH  put this mcp-tasks binary in the wheel and the npm package, instead of building
#                  one with `cargo build --release --locked -p mcp-tasks` (the package tests,
#                  crates/cli/tests/packages.rs, pass the binary the test build made, so packaging
#                  costs no second build)
#   --out DIR      where the packages go (default: target/packages in the repository)
#
# Tools: the wheel is written by the PyPA's `wheel` and tagged by `auditwheel` (pinned in
# packaging/requirements.txt, installed from PyPI into target/package-tools/venv, or
# $MCP_TASKS_PACKAGE_TOOLS, when missing); the npm packages need Node 18+ and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

binary=""
out="$repo/target/packages"
kinds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$(realpath "$2"); shift 2 ;;
    --out) mkdir -p "$2"; out=$(realpath "$2"); shift 2 ;;
    wheel|npm|crates|tools) kinds+=("$1"); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "package.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#kinds[@]} -gt 0 ] || kinds=(wheel npm crates)
wants() { local k; for k in "${kinds[@]}"; do [ "$k" = "$1" ] && return 0; done; return 1; }

tools="${MCP_TASKS_PACKAGE_TOOLS:-$repo/target/package-tools}"
tools_python() {
  local stamp
  stamp=$(sha256sum packaging/requirements.txt | cut -d' ' -f1)
  if [ "$(cat "$tools/venv/.mcp-tasks-stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "==> packaging tools: $(grep -v '^#' packaging/requirements.txt | xargs) (PyPI) into $tools/venv" >&2
    rm -rf "$tools/venv"
    python3 -m venv "$tools/venv"
    "$tools/venv/bin/pip" install --quiet --disable-pip-version-check -r packaging/requirements.txt
    echo "$stamp" > "$tools/venv/.mcp-tasks-stamp"
  fi
  echo "$tools/venv/bin/python"
}

if wants tools; then
  tools_python >/dev/null
  [ ${#kinds[@]} -gt 1 ] || exit 0
fi

version=$(cargo metadata --no-deps --format-version 1 --locked \
  | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "mcp-tasks"))')

if wants wheel || wants npm; then
  if [ -z "$binary" ]; then
    echo "==> cargo build --release --locked -p mcp-tasks" >&2
    cargo build --release --locked -p mcp-tasks
    binary="${CARGO_TARGET_DIR:-$repo/target}/release/mcp-tasks"
  fi
  [ -x "$binary" ] || { echo "package.sh: $binary is not an executable" >&2; exit 1; }
  got=$("$binary" --version)
  [ "$got" = "mcp-tasks $version" ] || { echo "package.sh: $binary says '$got', the crate is $version" >&2; exit 1; }
  mkdir -p "$out/man"
  rm -f "$out"/man/*.1
  "$binary" man --dir "$out/man" >/dev/null
fi

if wants wheel; then
  echo "==> wheel (packaging/wheel.py)" >&2
  py=$(tools_python)
  rm -f "$out"/mcp_tasks-"$version"-*.whl
  "$py" packaging/wheel.py --binary "$binary" --version "$version" --man "$out/man" \
    --readme packaging/README.md --license LICENSE --out "$out"
fi

if wants npm; then
  echo "==> npm packages (packaging/npm/build.mjs)" >&2
  mkdir -p "$out/npm"
  rm -f "$out/npm/mcp-tasks-$version.tgz"
  node packaging/npm/build.mjs --version "$version" --binary "$binary" --man "$out/man" \
    --readme packaging/README.md --license LICENSE --out "$out/npm"
fi

if wants crates; then
  echo "==> crates: cargo package (each published crate), then the .crate files built together" >&2
  target="${CARGO_TARGET_DIR:-$repo/target}"
  rm -f "$target"/package/*.crate
  # --allow-dirty: the tests package the tree as it is, edits included; a release is cut from a
  # clean commit (docs/releasing.md), and `cargo publish` builds each crate alone again then.
  cargo package --workspace --exclude mcp-tasks-bench --locked --allow-dirty --no-verify
  mkdir -p "$out/crates"
  rm -f "$out"/crates/*.crate
  cp "$target"/package/*-"$version".crate "$out/crates/"
  # The verification: a workspace of the unpacked .crate files, in which each dependency on a
  # sibling is that sibling's .crate (what crates.io will hold), built as one graph. cargo
  # package's own verification builds each crate alone, compiling the dependencies again for each
  # crate's feature set: 13 minutes more on a fresh machine. The workspace's profile is given so
  # that what the tests compiled is reused.
  verify="$target/package/verify"
  rm -rf "$verify"
  mkdir -p "$verify"
  members=""
  patches=""
  for crate in "$out"/crates/*.crate; do
    # -m: the files get the time of extraction. cargo package stamps every file with one fixed
    # old time, and cargo judges a path crate fresh when its files are older than its last build
    # in this target directory: the crates of an earlier run would be reused, unchecked.
    tar -xmzf "$crate" -C "$verify"
    dir=$(basename "$crate" .crate)
    members="$members\"$dir\", "
    patches="$patches${dir%-"$version"} = { path = \"$dir\" }"$'\n'
  done
  {
    echo "# Written by scripts/package.sh: the published crates as packaged, built together."
    echo "[workspace]"
    echo "resolver = \"2\""
    echo "members = [${members%, }]"
    echo
    echo "[patch.crates-io]"
    printf '%s' "$patches"
    echo
    echo "[profile.dev]"
    echo "debug = \"line-tables-only\""
    echo
    echo "[profile.dev.package.\"*\"]"
    echo "opt-level = 1"
  } > "$verify/Cargo.toml"
  # The versions the repository locks (cargo leaves out what these crates do not use).
  cp Cargo.lock "$verify/Cargo.lock"
  (cd "$verify" && cargo build --workspace --offline)
  ls "$out"/crates/*.crate
fi
