//! `interop/python/wrap_client.py`: the official Python SDK client as a host that sends no task
//! requests, starting `BINARY wrap FLAGS -- python upstream_server.py MARKERS --stdio` over stdio.

use super::{repo_root, text};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The interop venv's Python, which has the SDK (scripts/test.sh makes it).
pub fn python() -> PathBuf {
    let py = repo_root().join("interop/python/.venv/bin/python");
    assert!(
        py.exists(),
        "interop/python/.venv is missing: run scripts/test.sh"
    );
    py
}

/// Runs `wrap_client.py PHASE [TASK_ID]` against `binary`, the user's data under `data`; fails the
/// test unless every check passed. Its output.
pub fn run(
    binary: &Path,
    data: &Path,
    markers: &Path,
    flags: &str,
    phase: &str,
    task: Option<&str>,
) -> String {
    let mut cmd = Command::new(python());
    cmd.arg("interop/python/wrap_client.py")
        .arg(binary)
        .arg(markers)
        .arg(phase)
        .args(task)
        .current_dir(repo_root())
        .env("XDG_DATA_HOME", data)
        .env("WRAP_FLAGS", flags)
        .env("RUST_LOG", "warn");
    let out = super::output_within(&mut cmd, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with(" 0 failed"),
        "wrap_client.py {phase} with {} failed ({}):\n{stdout}\n{}",
        binary.display(),
        out.status,
        text(&out.stderr)
    );
    stdout
}
