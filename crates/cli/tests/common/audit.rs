//! Servers whose audit log goes to a file, and what that log says the demo's `pipeline` did: each
//! step body writes one `pipeline step ran task=… item=… attempt=…` line, the side effect the
//! resume tests count.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// Sends `cmd`'s log (warnings and the audit lines, without colours) to the end of `log`.
pub fn log_audit_to(cmd: &mut Command, log: &Path) {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    cmd.env("RUST_LOG", "warn,mcp_tasks::audit=info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::from(file));
}

/// (task, item) → how many times a pipeline step's body ran, from the audit lines of `logs`.
pub fn pipeline_step_runs(logs: &[&Path]) -> BTreeMap<(String, u64), usize> {
    let mut runs = BTreeMap::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("pipeline step ran")) {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .map(|v| v.trim_matches('"').to_string())
            };
            let (Some(task), Some(item)) = (field("task="), field("item=")) else {
                panic!("an audit line without task or item: {line}")
            };
            *runs
                .entry((task, item.parse::<u64>().unwrap()))
                .or_default() += 1;
        }
    }
    runs
}
