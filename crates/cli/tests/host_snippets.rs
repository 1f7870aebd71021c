//! The README's host snippets (`## Wrap any MCP server` → `### In a host's config`) work as written:
//! every JSON config snippet and every `claude mcp add` line is parsed, and the command (or URL) each
//! entry names is run to a completed call, with `python /path/to/server.py` standing for a test
//! upstream (the Python SDK server) and 127.0.0.1:8080 for a demo server of the test's own.

mod common;

use common::{bin, repo_root, text, ServerProcess};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// The README's host section.
fn section() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let start = readme
        .find("### In a host's config")
        .expect("the README has the host section");
    let rest = &readme[start..];
    let end = rest[4..].find("\n## ").map_or(rest.len(), |i| i + 4);
    rest[..end].to_string()
}

/// The fenced blocks of `lang` in `text`.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&fence) {
        let body = &rest[i + fence.len()..];
        let end = body.find("```").expect("a closed block");
        out.push(body[..end].to_string());
        rest = &body[end..];
    }
    out
}

/// A snippet's command line with the stand-ins replaced: `mcp-tasks` is the binary under test,
/// `python /path/to/server.py` the test upstream over stdio, 127.0.0.1:8080 the demo server.
fn substitute(words: &[String], markers: &str, demo_url: &str) -> Vec<String> {
    let py = repo_root().join("interop/python/.venv/bin/python");
    let upstream = repo_root().join("interop/python/upstream_server.py");
    let mut out = Vec::new();
    for w in words {
        match w.as_str() {
            "mcp-tasks" => out.push(bin().display().to_string()),
            "python" => out.push(py.display().to_string()),
            "/path/to/server.py" => {
                out.push(upstream.display().to_string());
                out.push(markers.to_string());
                out.push("--stdio".into());
            }
            "http://127.0.0.1:8080/mcp" => out.push(demo_url.to_string()),
            other => out.push(other.to_string()),
        }
    }
    out
}

/// Calls a tool through `mcp-tasks call`, against a stdio command or a URL; its output.
fn call(target: Target, tool: &[&str], data: &std::path::Path) -> String {
    let mut cmd = Command::new(bin());
    cmd.arg("call");
    match &target {
        Target::Stdio(words) => {
            let line = words
                .iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(" ");
            cmd.args(["--stdio", &line]);
        }
        Target::Url(url) => {
            cmd.args(["--url", url]);
        }
    }
    cmd.args(tool)
        .env("XDG_DATA_HOME", data)
        .env("XDG_STATE_HOME", data)
        .env("RUST_LOG", "warn")
        .env_remove("MCP_TASKS_URL")
        .stdin(std::process::Stdio::null());
    let out = common::output_within(&mut cmd, Duration::from_secs(60));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{target:?} {tool:?}: {}\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

#[derive(Debug)]
enum Target {
    Stdio(Vec<String>),
    Url(String),
}

/// What a config entry names.
fn target_of(entry: &Value, markers: &str, demo_url: &str) -> Target {
    if let Some(url) = entry["url"].as_str() {
        return Target::Url(substitute(&[url.to_string()], markers, demo_url).remove(0));
    }
    let mut words = vec![entry["command"].as_str().expect("a command").to_string()];
    for a in entry["args"].as_array().expect("args") {
        words.push(a.as_str().unwrap().to_string());
    }
    Target::Stdio(substitute(&words, markers, demo_url))
}

/// Runs one entry to a completed call: the upstream's `count` through a wrapped stdio server, the
/// demo's `slow_compute` through the HTTP server (directly or through `wrap --url`).
fn run(target: Target, data: &std::path::Path) {
    let wraps_upstream =
        matches!(&target, Target::Stdio(w) if w.iter().any(|a| a.ends_with("upstream_server.py")));
    if wraps_upstream {
        let out = call(target, &["count", "n=3", "delay=0.1"], data);
        assert!(out.contains("counted to 3"), "{out}");
    } else {
        let out = call(target, &["slow_compute", "seconds=1"], data);
        assert!(out.contains("finished after 1 second"), "{out}");
    }
}

#[test]
fn every_host_snippet_of_the_readme_runs_to_a_completed_call() {
    let demo = ServerProcess::start(&["--demo", "--store", "memory:"]);
    let data = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    let markers = markers.path().display().to_string();
    let section = section();
    let mut ran = 0;
    for json in blocks(&section, "json") {
        let config: Value = serde_json::from_str(&json)
            .unwrap_or_else(|e| panic!("a JSON snippet does not parse: {e}\n{json}"));
        let servers = config
            .get("mcpServers")
            .or_else(|| config.get("servers"))
            .and_then(Value::as_object)
            .unwrap_or_else(|| panic!("no mcpServers or servers in {json}"));
        for (name, entry) in servers {
            eprintln!("snippet entry {name}: {entry}");
            run(target_of(entry, &markers, &demo.url), data.path());
            ran += 1;
        }
    }
    assert_eq!(ran, 6, "three hosts, two entries each");
    // Claude Code: `claude mcp add NAME -- COMMAND…` and `claude mcp add --transport http NAME URL`.
    let mut lines = 0;
    for sh in blocks(&section, "sh") {
        for line in sh.lines().filter(|l| l.starts_with("claude mcp add")) {
            let target = match line.split_once(" -- ") {
                Some((_, command)) => Target::Stdio(substitute(
                    &command
                        .split_whitespace()
                        .map(String::from)
                        .collect::<Vec<_>>(),
                    &markers,
                    &demo.url,
                )),
                None => Target::Url(
                    substitute(
                        &[line.split_whitespace().last().unwrap().to_string()],
                        &markers,
                        &demo.url,
                    )
                    .remove(0),
                ),
            };
            run(target, data.path());
            lines += 1;
        }
    }
    assert_eq!(lines, 2);
}
