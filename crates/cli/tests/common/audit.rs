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
            let field = |name: &str| field(line, name);
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

/// The pipeline's step bodies as a history (see [`super::history`]): one effect per audit line of
/// each `(node, log)`, at the line's time, for its task, attempt and item.
pub fn pipeline_effects(logs: &[(String, &Path)]) -> Vec<super::history::Effect> {
    let mut effects = Vec::new();
    for (node, log) in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("pipeline step ran")) {
            let field = |name: &str| field(line, name);
            let stamp = line.split_whitespace().next().unwrap_or_default();
            let at =
                time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
                    .unwrap_or_else(|e| panic!("an audit line without its time ({e}): {line}"));
            let (Some(task), Some(item), Some(attempt)) =
                (field("task="), field("item="), field("attempt="))
            else {
                panic!("an audit line without task, item or attempt: {line}")
            };
            effects.push(super::history::Effect {
                task,
                node: node.clone(),
                attempt: attempt.parse().unwrap(),
                at_ns: u128::try_from(at.unix_timestamp_nanos()).unwrap(),
                step: Some(item),
            });
        }
    }
    effects
}

/// The value of `name=` (as `task=`) in an audit line.
fn field(line: &str, name: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name))
        .map(|v| v.trim_matches('"').to_string())
}
