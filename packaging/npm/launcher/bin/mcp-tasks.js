#!/usr/bin/env node
// The `mcp-tasks` command of the npm package: finds the binary of this platform's package (an
// optional dependency, `@mcp-tasks/<platform>-<arch>`, that npm installs only where it fits) and runs
// it with this process's arguments, standard streams, signals and exit status.
"use strict";

const { spawn } = require("node:child_process");
const path = require("node:path");
const tty = require("node:tty");
const { optionalDependencies = {} } = require("../package.json");

const key = `${process.platform}-${process.arch}`;
const pkg = `@mcp-tasks/${key}`;
const exe = process.platform === "win32" ? "mcp-tasks.exe" : "mcp-tasks";

function binary() {
  // MCP_TASKS_BINARY names another binary (one built from source, say), as esbuild's override does.
  if (process.env.MCP_TASKS_BINARY) return process.env.MCP_TASKS_BINARY;
  try {
    return path.join(path.dirname(require.resolve(`${pkg}/package.json`)), "bin", exe);
  } catch {
    const published = Object.keys(optionalDependencies).map((p) => p.replace("@mcp-tasks/", ""));
    const why = published.includes(key)
      ? `its package ${pkg} is not installed (was it installed with --omit=optional or --no-optional?); ` +
        "install again without that flag"
      : `no package of it is built for ${key} (there are: ${published.join(", ") || "none"}); ` +
        "install it with `cargo install mcp-tasks`, or set MCP_TASKS_BINARY to a binary of it";
    process.stderr.write(`mcp-tasks: no binary for this platform: ${why}\n`);
    process.exit(1);
  }
}

const file = binary();
const child = spawn(file, process.argv.slice(2), { stdio: "inherit" });

// A terminal's Ctrl-C reaches the whole foreground process group, the binary included: passing it
// on as well would be a second signal, which the binary takes as "stop at once, do not drain".
// Without a terminal (a host that signals this process only), it is passed on. (`tty.isatty(0)`,
// not `process.stdin.isTTY`: opening process.stdin would make the shared stdin non-blocking, and
// the binary's reads of it would fail with EAGAIN.)
const terminal = tty.isatty(0);
const forwarded = ["SIGTERM", "SIGHUP", "SIGQUIT"];
if (!terminal) forwarded.push("SIGINT");
for (const sig of forwarded) process.on(sig, () => child.kill(sig));
if (terminal) process.on("SIGINT", () => {});

child.on("error", (err) => {
  process.stderr.write(`mcp-tasks: could not run ${file}: ${err.message}\n`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    // End the way the binary ended, so the caller sees the same signal.
    for (const sig of forwarded) process.removeAllListeners(sig);
    process.removeAllListeners("SIGINT");
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code ?? 1);
});
