//! The tasks this machine started, remembered so that `task result ID` works without `--url`:
//! one JSON file per task under `$XDG_STATE_HOME/mcp-tasks/tasks/` (never keys or headers).

use anyhow::{Context, Result};
use mcp_tasks_client::TaskRef;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A remembered task.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Remembered {
    /// How to reach it.
    #[serde(flatten)]
    pub reference: TaskRef,
    /// When it was started (seconds since the epoch).
    pub started_at: u64,
}

/// The directory of remembered tasks.
pub fn dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("mcp-tasks").join("tasks")
}

/// A file name for a task id: the id itself when it is plain, else its bytes in hex.
fn file_of(id: &str) -> PathBuf {
    let plain = !id.is_empty()
        && id.len() <= 200
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let name = if plain {
        id.to_string()
    } else {
        format!(
            "x{}",
            id.bytes().map(|b| format!("{b:02x}")).collect::<String>()
        )
    };
    dir().join(format!("{name}.json"))
}

/// Remembers `r` (written to a temporary file, then renamed: never half a file).
pub fn remember(r: &TaskRef) -> Result<()> {
    let d = dir();
    std::fs::create_dir_all(&d).with_context(|| format!("create {}", d.display()))?;
    let started_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let body = serde_json::to_vec_pretty(&Remembered {
        reference: r.clone(),
        started_at,
    })?;
    let path = file_of(&r.task_id);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, body).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// The remembered task `id`, if any.
pub fn recall(id: &str) -> Option<Remembered> {
    let text = std::fs::read_to_string(file_of(id)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Every remembered task, oldest first (unreadable files are skipped).
pub fn all() -> Vec<Remembered> {
    let mut out: Vec<Remembered> = std::fs::read_dir(dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok())
        .collect();
    out.sort_by_key(|r: &Remembered| r.started_at);
    out
}
