//! `mcp-tasks call` on a real terminal (tmux), as a person would use it: the progress bar moves,
//! and a form question is answered by typing.

mod common;

use common::{bin, eventually, ServerProcess};
use std::process::Command;
use std::time::Duration;

/// A tmux server of the test's own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str) -> Tmux {
        let socket = format!("mcp-tasks-test-{}-{}", std::process::id(), rand_suffix());
        let t = Tmux { socket };
        let ok = t
            .cmd(&[
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "120",
                "-y",
                "40",
                command,
            ])
            .status()
            .expect("tmux is missing: scripts/test.sh installs Debian's tmux")
            .success();
        assert!(ok, "tmux new-session failed");
        t
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "-f", "/dev/null"]).args(args);
        c
    }

    fn screen(&self) -> String {
        let out = self
            .cmd(&["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "t"];
        a.extend_from_slice(keys);
        assert!(self.cmd(&a).status().unwrap().success());
    }

    /// Waits until the screen shows `text` (at most 20 s).
    fn wait_for(&self, text: &str) -> String {
        let mut last = String::new();
        let seen = eventually(Duration::from_secs(20), || {
            last = self.screen();
            last.contains(text)
        });
        assert!(
            seen,
            "the terminal never showed {text:?}; it shows:\n{last}"
        );
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0)
}

fn call_line(server: &ServerProcess, state: &std::path::Path, args: &str) -> String {
    format!(
        "XDG_STATE_HOME={} {} call --url {} {args}; echo EXIT=$?; sleep 60",
        state.display(),
        bin().display(),
        server.url
    )
}

/// The percentages a progress bar shows on the screen.
fn percent(screen: &str) -> Option<u32> {
    screen
        .split_whitespace()
        .filter_map(|w| w.strip_suffix('%')?.parse().ok())
        .next()
}

#[test]
fn the_progress_bar_moves_on_a_terminal() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let state = tempfile::tempdir().unwrap();
    let t = Tmux::start(&call_line(
        &server,
        state.path(),
        "slow_compute seconds=4 label=bar",
    ));
    let first = t.wait_for("working: 1 of 4 seconds");
    let p1 = percent(&first).unwrap_or_else(|| panic!("no percentage on:\n{first}"));
    let later = t.wait_for("working: 3 of 4 seconds");
    let p2 = percent(&later).unwrap_or_else(|| panic!("no percentage on:\n{later}"));
    assert!(p1 < p2, "the bar moved forward: {p1}% then {p2}%");
    assert!(
        later.contains("[") && later.contains("=>"),
        "a bar is drawn:\n{later}"
    );
    let end = t.wait_for("EXIT=");
    assert!(
        end.contains("slow_compute (bar) finished after 4 seconds"),
        "{end}"
    );
    assert!(end.contains("EXIT=0"), "{end}");
    assert!(
        !end.contains("working: 3 of 4"),
        "the bar is cleared at the end:\n{end}"
    );
}

#[test]
fn a_form_is_answered_by_typing() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let state = tempfile::tempdir().unwrap();
    // One yes/no field.
    let t = Tmux::start(&call_line(
        &server,
        state.path(),
        "confirm_delete filename=notes.txt",
    ));
    t.wait_for("Answer it?");
    t.keys(&["Enter"]); // Answer
    t.wait_for("Delete it?");
    t.keys(&["y"]);
    let end = t.wait_for("EXIT=");
    assert!(
        end.contains("Deleted notes.txt") && end.contains("EXIT=0"),
        "{end}"
    );
    drop(t);

    // Two questions at once (in either order), text fields typed in.
    let t = Tmux::start(&call_line(&server, state.path(), "multi_input"));
    for _ in 0..2 {
        let asking = |screen: &str| {
            screen
                .lines()
                .rev()
                .find(|l| l.starts_with("? "))
                .map(str::to_string)
        };
        let mut prompt = String::new();
        assert!(
            eventually(Duration::from_secs(20), || {
                prompt = asking(&t.screen()).unwrap_or_default();
                prompt.contains("Answer it?")
            }),
            "no question came:\n{}",
            t.screen()
        );
        t.keys(&["Enter"]);
        assert!(
            eventually(Duration::from_secs(20), || {
                prompt = asking(&t.screen()).unwrap_or_default();
                prompt.contains("name") || prompt.contains("color")
            }),
            "no field prompt:\n{}",
            t.screen()
        );
        let typed = if prompt.contains("name") {
            "Ada"
        } else {
            "teal"
        };
        t.keys(&["-l", typed]);
        t.keys(&["Enter"]);
        t.wait_for(&format!("· {typed}"));
    }
    let end = t.wait_for("EXIT=");
    assert!(
        end.contains("Ada") && end.contains("teal") && end.contains("EXIT=0"),
        "{end}"
    );
    drop(t);

    // Declined from the menu: the tool hears "decline".
    let t = Tmux::start(&call_line(
        &server,
        state.path(),
        "confirm_delete filename=keep.txt",
    ));
    t.wait_for("Answer it?");
    t.keys(&["Down"]);
    t.keys(&["Enter"]);
    let end = t.wait_for("EXIT=");
    assert!(
        end.contains("Kept keep.txt") && end.contains("EXIT=0"),
        "{end}"
    );
}
