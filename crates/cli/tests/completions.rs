//! Shell completions and manual pages (issue 28): generated from the flags, and they work: bash
//! completes a subcommand and a flag of `wrap` from the script it is given; the manual pages name
//! every subcommand and `wrap`'s flags.

mod common;

use common::{bin, text};
use std::process::Command;

fn mcp_tasks(args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// What bash offers for the words `line` (the last one being completed), with our script loaded.
fn bash_completes(script: &std::path::Path, line: &[&str]) -> Vec<String> {
    let words = line
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let program = format!(
        "source '{}'; COMP_WORDS=({words}); COMP_CWORD={}; COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}; \
         $(complete -p mcp-tasks | sed -E 's/.*-F ([^ ]+).*/\\1/') mcp-tasks '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        line.len() - 1,
        line.join(" "),
        line[line.len() - 1],
        line[line.len().saturating_sub(2)],
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(String::from).collect()
}

#[test]
fn bash_completes_subcommands_and_flags_from_the_generated_script() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("mcp-tasks.bash");
    std::fs::write(&script, mcp_tasks(&["completions", "bash"])).unwrap();
    let subcommands = bash_completes(&script, &["mcp-tasks", "wr"]);
    assert_eq!(subcommands, ["wrap"], "{subcommands:?}");
    let flags = bash_completes(&script, &["mcp-tasks", "wrap", "--sync"]);
    assert_eq!(flags, ["--sync-budget"], "{flags:?}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let s = mcp_tasks(&["completions", shell]);
        assert!(s.contains("wrap") && s.contains("sync-budget"), "{shell}");
    }
}

#[test]
fn the_manual_pages_cover_every_subcommand() {
    let top = mcp_tasks(&["man"]);
    assert!(
        top.starts_with(".ie") || top.contains(".TH mcp-tasks 1"),
        "{top}"
    );
    for sub in [
        "serve",
        "wrap",
        "call",
        "task",
        "admin",
        "tools",
        "completions",
    ] {
        assert!(
            top.contains(&format!("mcp\\-tasks\\-{sub}(1)")),
            "{sub} in the page"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    mcp_tasks(&["man", "--dir", dir.path().to_str().unwrap()]);
    let wrap = std::fs::read_to_string(dir.path().join("mcp-tasks-wrap.1")).unwrap();
    assert!(
        wrap.contains("sync\\-budget") && wrap.contains("retry\\-on\\-restart"),
        "{wrap}"
    );
    assert!(dir.path().join("mcp-tasks-task-watch.1").exists());
}
