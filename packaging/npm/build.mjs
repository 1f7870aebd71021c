#!/usr/bin/env node
// Builds the npm packages of mcp-tasks the way esbuild and biome ship binaries: one package per
// platform, `@mcp-tasks/<platform>-<arch>`, holding the binary and declaring `os` / `cpu` (and `libc`
// on Linux) so that npm installs only the one that fits, and the launcher `mcp-tasks`, whose
// `bin/mcp-tasks.js` runs it and which lists each platform package as an optional dependency.
//
// Usage: node build.mjs --version V --out DIR --readme FILE --license FILE --man DIR [--binary PATH]
//   --binary PATH  also build this host's platform package around PATH
// The launcher lists every platform package tarball of this version found in DIR, so a release can
// gather the tarballs built on each platform into DIR and build the launcher once more
// (docs/releasing.md). Prints the tarballs it wrote, one per line.

import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    version: { type: "string" },
    out: { type: "string" },
    readme: { type: "string" },
    license: { type: "string" },
    man: { type: "string" },
    binary: { type: "string" },
  },
});
for (const need of ["version", "out", "readme", "license", "man"]) {
  if (!args[need]) {
    console.error(`build.mjs: --${need} is required`);
    process.exit(2);
  }
}
const version = args.version;
const out = path.resolve(args.out);
fs.mkdirSync(out, { recursive: true });

const common = {
  version,
  license: "Apache-2.0",
  keywords: ["mcp", "model-context-protocol", "tasks", "long-running", "durable", "gateway"],
};

function pack(dir) {
  const name = execFileSync("npm", ["pack", "--silent", "--pack-destination", out], {
    cwd: dir,
    encoding: "utf8",
  }).trim();
  return path.join(out, name.split("\n").pop());
}

function stage(name) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `mcp-tasks-npm-${name}-`));
  fs.copyFileSync(args.readme, path.join(dir, "README.md"));
  fs.copyFileSync(args.license, path.join(dir, "LICENSE"));
  return dir;
}

const written = [];

if (args.binary) {
  const key = `${process.platform}-${process.arch}`;
  const dir = stage(key);
  fs.mkdirSync(path.join(dir, "bin"));
  const exe = process.platform === "win32" ? "mcp-tasks.exe" : "mcp-tasks";
  fs.copyFileSync(args.binary, path.join(dir, "bin", exe));
  fs.chmodSync(path.join(dir, "bin", exe), 0o755);
  const pkg = {
    name: `@mcp-tasks/${key}`,
    ...common,
    description: `The mcp-tasks binary for ${key}; installed by the mcp-tasks package, not to be used directly`,
    os: [process.platform],
    cpu: [process.arch],
    files: ["bin/", "README.md", "LICENSE"],
    // Package managers that keep packages zipped (Yarn PnP) must unpack this one to run its binary.
    preferUnplugged: true,
  };
  // The binary is linked against the C library of the machine that built it: on Linux, npm's
  // `libc` field keeps a glibc build off musl systems (Alpine), where it would not start.
  if (process.platform === "linux") {
    pkg.libc = [process.report.getReport().header.glibcVersionRuntime ? "glibc" : "musl"];
  }
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify(pkg, null, 2) + "\n");
  written.push(pack(dir));
  fs.rmSync(dir, { recursive: true, force: true });
}

// The launcher: every platform package of this version that is in `out`.
const platformTarball = new RegExp(`^mcp-tasks-([a-z0-9]+-[a-z0-9]+)-${version.replace(/\./g, "\\.")}\\.tgz$`);
const platforms = fs
  .readdirSync(out)
  .map((f) => platformTarball.exec(f)?.[1])
  .filter(Boolean)
  .sort();
if (platforms.length === 0) {
  console.error(`build.mjs: no platform package of ${version} in ${out}: give --binary`);
  process.exit(1);
}
const dir = stage("launcher");
fs.cpSync(path.join(here, "launcher", "bin"), path.join(dir, "bin"), { recursive: true });
fs.chmodSync(path.join(dir, "bin", "mcp-tasks.js"), 0o755);
fs.mkdirSync(path.join(dir, "man"));
const pages = fs.readdirSync(args.man).filter((f) => f.endsWith(".1")).sort();
for (const page of pages) fs.copyFileSync(path.join(args.man, page), path.join(dir, "man", page));
const launcher = {
  name: "mcp-tasks",
  ...common,
  description:
    "Durable, long-running MCP tool calls: wrap any MCP server so its tools run as tasks that survive timeouts, disconnects and restarts",
  bin: { "mcp-tasks": "bin/mcp-tasks.js" },
  man: pages.map((p) => `./man/${p}`),
  files: ["bin/", "man/", "README.md", "LICENSE"],
  engines: { node: ">=18" },
  optionalDependencies: Object.fromEntries(platforms.map((p) => [`@mcp-tasks/${p}`, version])),
};
fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify(launcher, null, 2) + "\n");
written.push(pack(dir));
fs.rmSync(dir, { recursive: true, force: true });

for (const file of written) console.log(file);
