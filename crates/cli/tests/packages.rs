//! The packages (issue 28): `scripts/package.sh` builds the wheel and the npm packages around the
//! binary these tests run (so packaging costs no second build), then each is installed as a user
//! would and driven to a completed call: the wheel in a fresh venv, the npm tarballs into an empty
//! prefix; from the installed `mcp-tasks`, `wrap` fronts a Python SDK server and the official Python
//! SDK client (a host that sends no tasks) calls a tool past the budget and reads its result. The
//! crates' metadata is checked here; `scripts/test.sh` builds each crate from its `.crate` file
//! (`scripts/package.sh crates`) and runs `cargo install --path crates/cli`.

mod common;

use common::{bin, repo_root, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// `scripts/package.sh --binary BIN --out OUT KIND`; the files it wrote under `out`.
fn package(kind: &str, out: &Path) {
    let mut cmd = Command::new("bash");
    cmd.arg("scripts/package.sh")
        .arg("--binary")
        .arg(bin())
        .arg("--out")
        .arg(out)
        .arg(kind)
        .current_dir(repo_root());
    let done = common::output_within(&mut cmd, Duration::from_secs(300));
    assert!(
        done.status.success(),
        "package.sh {kind} failed ({}):\n{}\n{}",
        done.status,
        text(&done.stdout),
        text(&done.stderr)
    );
}

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let done = common::output_within(cmd, Duration::from_secs(180));
    assert!(
        done.status.success(),
        "{what} failed ({}):\n{}\n{}",
        done.status,
        text(&done.stdout),
        text(&done.stderr)
    );
    text(&done.stdout)
}

/// The official Python SDK client through `INSTALLED wrap -- python upstream_server.py`.
fn call_through(installed: &Path) {
    let data = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    common::wrap_client::run(
        installed,
        data.path(),
        markers.path(),
        "--sync-budget 1",
        "all",
        None,
    );
}

fn man_pages(dir: &Path) -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".1"))
        .collect();
    pages.sort();
    pages
}

#[test]
fn the_wheel_installs_in_a_fresh_venv_and_its_mcp_tasks_wraps_a_python_server() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("packages");
    package("wheel", &out);
    let wheels: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let name = wheels[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // Any Python 3, any ABI; the platform is the oldest manylinux the binary's symbols allow.
    let prefix = format!("mcp_tasks-{}-py3-none-manylinux_", version());
    assert!(
        name.starts_with(&prefix) && name.ends_with("_x86_64.whl") || !cfg!(target_arch = "x86_64"),
        "{name}"
    );

    let venv = work.path().join("venv");
    run_ok(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        "python3 -m venv",
    );
    // --no-index: the wheel carries all it needs (pip checks every file against RECORD).
    run_ok(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--no-index", "--disable-pip-version-check"])
            .arg(&wheels[0]),
        "pip install the wheel",
    );
    let installed = venv.join("bin/mcp-tasks");
    let said = run_ok(
        Command::new(&installed).arg("--version"),
        "mcp-tasks --version",
    );
    assert_eq!(said.trim(), format!("mcp-tasks {}", version()));
    let pages = man_pages(&venv.join("share/man/man1"));
    assert!(
        pages.contains(&"mcp-tasks.1".to_string())
            && pages.contains(&"mcp-tasks-wrap.1".to_string()),
        "{pages:?}"
    );
    let shown = run_ok(
        Command::new(venv.join("bin/pip")).args(["show", "--files", "mcp-tasks"]),
        "pip show",
    );
    assert!(
        shown.contains(&format!("Version: {}", version()))
            && shown.contains("licenses/LICENSE")
            && shown.contains("man1/mcp-tasks.1"),
        "{shown}"
    );
    let location = shown
        .lines()
        .find_map(|l| l.strip_prefix("Location: "))
        .unwrap_or_else(|| panic!("{shown}"));
    let metadata = std::fs::read_to_string(
        Path::new(location)
            .join(format!("mcp_tasks-{}.dist-info", version()))
            .join("METADATA"),
    )
    .unwrap();
    assert!(
        metadata.contains("License-Expression: Apache-2.0")
            && metadata.contains("Requires-Python: >=3.8"),
        "{metadata}"
    );

    call_through(&installed);

    // Without an install step, as a host's config line runs it: `uvx mcp-tasks wrap -- …` (here
    // from the wheel file instead of PyPI) and `pipx run mcp-tasks`.
    let tools = tools_bin();
    let uv_cache = work.path().join("uv-cache");
    let uvx = work.path().join("uvx-mcp-tasks");
    script(
        &uvx,
        &format!(
            "UV_CACHE_DIR='{}' exec '{}' --offline --from '{}' mcp-tasks \"$@\"",
            uv_cache.display(),
            tools.join("uvx").display(),
            wheels[0].display()
        ),
    );
    let said = run_ok(
        Command::new(&uvx).arg("--version"),
        "uvx mcp-tasks --version",
    );
    assert_eq!(said.trim(), format!("mcp-tasks {}", version()));
    call_through(&uvx);
    let said = run_ok(
        Command::new(tools.join("pipx"))
            .args(["run", "--spec"])
            .arg(&wheels[0])
            .args(["mcp-tasks", "--version"])
            .env("PIPX_HOME", work.path().join("pipx"))
            .env("PIPX_BIN_DIR", work.path().join("pipx-bin")),
        "pipx run mcp-tasks --version",
    );
    assert_eq!(said.trim(), format!("mcp-tasks {}", version()));
}

/// The packaging tools' venv (scripts/package.sh makes it): uvx and pipx.
fn tools_bin() -> PathBuf {
    let root = std::env::var_os("MCP_TASKS_PACKAGE_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/package-tools"));
    root.join("venv/bin")
}

/// An executable shell script running `line`.
fn script(path: &Path, line: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{line}\n")).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// The child processes of `pid` (Linux: /proc/PID/task/*/children).
fn children(pid: u32) -> Vec<u32> {
    let mut kids = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return kids;
    };
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            kids.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    kids
}

fn alive(pid: u32) -> bool {
    // A zombie has been reaped by nobody yet but runs no more.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

#[test]
fn the_npm_packages_install_into_an_empty_prefix_and_npx_mcp_tasks_wraps_a_python_server() {
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("packages");
    package("npm", &out);
    let npm_dir = out.join("npm");
    let launcher = npm_dir.join(format!("mcp-tasks-{}.tgz", version()));
    let platform = npm_dir.join(format!("mcp-tasks-linux-x64-{}.tgz", version()));
    assert!(
        launcher.exists() && platform.exists(),
        "{:?}",
        std::fs::read_dir(&npm_dir).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );

    // --offline: nothing may come from the registry; both packages are the tarballs.
    let prefix = work.path().join("prefix");
    std::fs::create_dir(&prefix).unwrap();
    npm_install(&prefix, &[], &[&launcher, &platform]);
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(prefix.join("node_modules/mcp-tasks/package.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        manifest["optionalDependencies"]["@mcp-tasks/linux-x64"],
        version()
    );
    let pages = man_pages(&prefix.join("node_modules/mcp-tasks/man"));
    assert!(pages.contains(&"mcp-tasks.1".to_string()), "{pages:?}");
    assert!(
        manifest["man"]
            .as_array()
            .is_some_and(|m| m.iter().any(|p| p == "./man/mcp-tasks.1")),
        "{manifest}"
    );

    // `npx mcp-tasks …` as the README writes it, run where the packages are installed.
    let said = run_ok(
        Command::new("npx")
            .args(["--offline", "mcp-tasks", "--version"])
            .current_dir(&prefix),
        "npx mcp-tasks --version",
    );
    assert_eq!(said.trim(), format!("mcp-tasks {}", version()));

    let installed = prefix.join("node_modules/.bin/mcp-tasks");
    call_through(&installed);
    // And as a host's config line `npx mcp-tasks wrap -- …` starts it: npm exec, a shell, the
    // launcher, the binary, all on the host's pipes.
    let npx = work.path().join("npx-mcp-tasks");
    script(
        &npx,
        &format!(
            "cd '{}' && exec npx --offline mcp-tasks \"$@\"",
            prefix.display()
        ),
    );
    call_through(&npx);

    // `npm install -g` of both tarballs, as the README says for a checkout: the command and its
    // man pages are linked into the prefix.
    let global = work.path().join("global");
    npm_install(&global, &["-g"], &[&launcher, &platform]);
    let said = run_ok(
        Command::new(global.join("bin/mcp-tasks")).arg("--version"),
        "the global mcp-tasks --version",
    );
    assert_eq!(said.trim(), format!("mcp-tasks {}", version()));
    let pages = man_pages(&global.join("share/man/man1"));
    assert!(pages.contains(&"mcp-tasks-wrap.1".to_string()), "{pages:?}");
    launcher_passes_on_sigterm(&installed);

    // Without the platform package, the launcher says what is missing and what to do.
    let bare = work.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    npm_install(&bare, &["--omit=optional"], &[&launcher]);
    let mut cmd = Command::new(bare.join("node_modules/.bin/mcp-tasks"));
    cmd.arg("--version");
    let done = common::output_within(&mut cmd, Duration::from_secs(30));
    let stderr = text(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no binary for this platform")
            && stderr.contains("@mcp-tasks/linux-x64")
            && stderr.contains("--omit=optional"),
        "{stderr}"
    );
}

/// `npm install --offline FLAGS --prefix PREFIX TARBALLS…`: nothing may come from the registry.
fn npm_install(prefix: &Path, flags: &[&str], tarballs: &[&Path]) {
    run_ok(
        Command::new("npm")
            .args(["install", "--offline", "--no-audit", "--no-fund"])
            .args(flags)
            .arg("--prefix")
            .arg(prefix)
            .args(tarballs),
        &format!("npm install {}", flags.join(" ")),
    );
}

/// A host starts the server with its stdin a pipe it writes nothing to for a while, and stops it by
/// signalling the process it started, here node: the binary under it must keep reading that pipe
/// (node must not have made it non-blocking), then get the signal and end, its upstream with it.
fn launcher_passes_on_sigterm(installed: &Path) {
    let data = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    let mut launcher = Command::new(installed)
        .arg("wrap")
        .arg("--")
        .arg(common::wrap_client::python())
        .arg(repo_root().join("interop/python/upstream_server.py"))
        .arg(markers.path())
        .arg("--stdio")
        .env("XDG_DATA_HOME", data.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let node = launcher.id();
    let mut binary = None;
    let mut upstream = None;
    let up = common::eventually(Duration::from_secs(30), || {
        binary = children(node).first().copied();
        upstream = binary.and_then(|b| children(b).first().copied());
        upstream.is_some()
    });
    assert!(up, "node {node}: binary {binary:?}, upstream {upstream:?}");
    let (binary, upstream) = (binary.unwrap(), upstream.unwrap());
    assert!(std::fs::read_link(format!("/proc/{binary}/exe"))
        .is_ok_and(|exe| exe.to_string_lossy().ends_with("/bin/mcp-tasks")));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        alive(binary),
        "the binary ended while its stdin was idle (EAGAIN on a non-blocking stdin?)"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &node.to_string()])
        .status();
    let ended = common::eventually(Duration::from_secs(30), || {
        launcher.try_wait().ok().flatten().is_some()
    });
    let gone = common::eventually(Duration::from_secs(10), || {
        !alive(binary) && !alive(upstream)
    });
    for pid in [node, binary, upstream] {
        if alive(pid) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
    let _ = launcher.wait();
    assert!(
        ended && gone,
        "node ended: {ended}; the binary and its upstream ended: {gone}"
    );
}

#[test]
fn every_published_crate_says_what_it_is_and_the_harness_is_not_published() {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1", "--locked"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let mut published = Vec::new();
    for p in packages {
        let name = p["name"].as_str().unwrap();
        if p["publish"] == serde_json::json!([]) {
            assert_eq!(
                name, "mcp-tasks-bench",
                "only the harness stays unpublished"
            );
            continue;
        }
        published.push(name.to_string());
        let manifest_dir = Path::new(p["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap();
        assert!(
            p["description"].as_str().is_some_and(|d| d.len() > 40),
            "{name}: description"
        );
        assert_eq!(p["license"], "Apache-2.0", "{name}");
        assert!(manifest_dir.join("LICENSE").exists(), "{name}: LICENSE");
        let readme = p["readme"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: readme"));
        assert!(manifest_dir.join(readme).exists(), "{name}: {readme}");
        // crates.io's rules: at most five keywords of at most 20 ASCII letters, digits, - or _.
        let keywords = p["keywords"].as_array().unwrap();
        assert!((1..=5).contains(&keywords.len()), "{name}: {keywords:?}");
        for k in keywords {
            let k = k.as_str().unwrap();
            assert!(
                k.len() <= 20
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{name}: keyword {k}"
            );
        }
        let categories = p["categories"].as_array().unwrap();
        assert!(
            (1..=5).contains(&categories.len()),
            "{name}: {categories:?}"
        );
        assert_eq!(p["version"], version(), "{name}: one version for all");
        if name != "mcp-tasks" {
            assert_eq!(
                p["documentation"].as_str(),
                Some(format!("https://docs.rs/{name}").as_str()),
                "{name}"
            );
        }
    }
    published.sort();
    assert_eq!(
        published,
        [
            "mcp-tasks",
            "mcp-tasks-client",
            "mcp-tasks-engine",
            "mcp-tasks-protocol",
            "mcp-tasks-server"
        ]
    );
    let changelog = std::fs::read_to_string(repo_root().join("CHANGELOG.md")).unwrap();
    assert!(
        changelog.contains(&format!("## Unreleased: {}", version()))
            || changelog.contains(&format!("## {} ", version())),
        "CHANGELOG.md has no entry for {}",
        version()
    );
    assert!(changelog.contains("## Version policy"));
}
