#!/usr/bin/env python3
"""Builds the PyPI wheel of mcp-tasks around a binary that is already built.

The wheel carries no Python code: the `mcp-tasks` executable goes in `<name>.data/scripts/`, which
pip, pipx and uv install as the environment's `bin/mcp-tasks` (the layout ruff and uv ship), and the
man pages in `<name>.data/data/share/man/man1/`. The wheel file itself is written by the PyPA's
`wheel pack` (it writes RECORD and checks the layout); on Linux the platform tag is the most
compatible manylinux tag that the PyPA's `auditwheel show` finds the binary consistent with.

Usage: wheel.py --binary PATH --version CARGO_VERSION --man DIR --readme FILE --license FILE --out DIR
Prints the path of the wheel it wrote.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

NAME = "mcp-tasks"
DIST = "mcp_tasks"  # the distribution name as wheel file names spell it
SUMMARY = (
    "Durable, long-running MCP tool calls: wrap any MCP server so its tools run as tasks that "
    "survive timeouts, disconnects and restarts"
)
KEYWORDS = "mcp,model-context-protocol,tasks,long-running,durable,gateway,llm"
CLASSIFIERS = [
    "Development Status :: 4 - Beta",
    "Environment :: Console",
    "Intended Audience :: Developers",
    "Programming Language :: Rust",
    "Topic :: Software Development :: Libraries :: Application Frameworks",
    "Topic :: System :: Distributed Computing",
]


def pep440(version: str) -> str:
    """Cargo's SemVer version as PEP 440 (`0.2.0-rc.1` is `0.2.0rc1`); anything else is refused."""
    m = re.fullmatch(r"(\d+\.\d+\.\d+)(?:-(alpha|beta|rc)\.(\d+))?", version)
    if not m:
        raise SystemExit(
            f"wheel.py: version {version!r} has no PEP 440 spelling here: use X.Y.Z or "
            "X.Y.Z-alpha.N / -beta.N / -rc.N (docs/releasing.md)"
        )
    base, pre, n = m.groups()
    return base + ({"alpha": "a", "beta": "b", "rc": "rc"}[pre] + n if pre else "")


def os_classifiers() -> list[str]:
    """The operating system this wheel's binary runs on: the one building it."""
    if sys.platform.startswith("linux"):
        return ["Operating System :: POSIX :: Linux"]
    if sys.platform == "darwin":
        return ["Operating System :: MacOS"]
    if sys.platform == "win32":
        return ["Operating System :: Microsoft :: Windows"]
    return []


def metadata(version: str, readme: str) -> str:
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {NAME}",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
        f"Keywords: {KEYWORDS}",
        "License-Expression: Apache-2.0",
        "License-File: LICENSE",
        "Requires-Python: >=3.8",
        *(f"Classifier: {c}" for c in CLASSIFIERS + os_classifiers()),
        "Description-Content-Type: text/markdown",
    ]
    return "\n".join(lines) + "\n\n" + readme


def host_tag() -> str:
    """This interpreter's platform tag (`linux_x86_64`, `macosx_11_0_arm64`, …)."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"wheel.py: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}{done.stdout}")
    return done.stdout


def manylinux_tag(wheel: Path) -> str:
    """The most compatible tag `auditwheel show` gives the wheel; refused when it names libraries
    outside the manylinux policy (they would be missing on the user's machine)."""
    report = json.loads(run(sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)))
    tag = report.get("overall_tag")
    if report.get("external_libs") or not isinstance(tag, str) or not tag.startswith("manylinux"):
        raise SystemExit(
            f"wheel.py: the binary fits no manylinux policy (auditwheel: {json.dumps(report)[:800]})"
        )
    return tag


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--binary", "--version", "--man", "--readme", "--license", "--out"):
        ap.add_argument(flag, required=True)
    args = ap.parse_args()
    version = pep440(args.version)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / f"{DIST}-{version}"
        info = stage / f"{DIST}-{version}.dist-info"
        data = stage / f"{DIST}-{version}.data"
        (info / "licenses").mkdir(parents=True)
        (data / "scripts").mkdir(parents=True)
        man1 = data / "data" / "share" / "man" / "man1"
        man1.mkdir(parents=True)
        readme = Path(args.readme).read_text(encoding="utf-8")
        (info / "METADATA").write_text(metadata(version, readme), encoding="utf-8")
        (info / "WHEEL").write_text(
            "Wheel-Version: 1.0\nGenerator: mcp-tasks scripts/package.sh\n"
            f"Root-Is-Purelib: false\nTag: py3-none-{host_tag()}\n",
            encoding="utf-8",
        )
        shutil.copyfile(args.license, info / "licenses" / "LICENSE")
        exe = data / "scripts" / (NAME + (".exe" if sys.platform == "win32" else ""))
        shutil.copyfile(args.binary, exe)
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        pages = sorted(Path(args.man).glob("*.1"))
        if not pages:
            raise SystemExit(f"wheel.py: no man pages (*.1) in {args.man}")
        for page in pages:
            shutil.copyfile(page, man1 / page.name)
        built = Path(tmp) / "built"
        built.mkdir()
        run(sys.executable, "-m", "wheel", "pack", str(stage), "--dest-dir", str(built))
        (wheel,) = built.glob("*.whl")
        if sys.platform.startswith("linux"):
            tag = manylinux_tag(wheel)
            run(sys.executable, "-m", "wheel", "tags", "--remove", "--platform-tag", tag, str(wheel))
            (wheel,) = built.glob("*.whl")
        final = out / wheel.name
        shutil.move(wheel, final)
    print(final)


if __name__ == "__main__":
    main()
