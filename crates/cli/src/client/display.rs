//! What a person sees on stderr while a task runs: a progress bar (a spinner when the total is
//! unknown) with the status message on a terminal; one line per change otherwise.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mcp_tasks_client::{Event, TaskState};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

/// What is known of the task: each event updates part of it, and the whole is shown.
#[derive(Clone, Debug, Default, PartialEq)]
struct Shown {
    task: Option<String>,
    status: Option<String>,
    message: Option<String>,
    done: Option<f64>,
    total: Option<f64>,
    ended: bool,
}

impl Shown {
    fn text(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(s) = &self.status {
            parts.push(s.clone());
        }
        if let Some(d) = self.done {
            parts.push(match self.total {
                Some(t) => format!("{d}/{t}"),
                None => format!("{d}"),
            });
        }
        let head = parts.join(" ");
        match &self.message {
            Some(m) if head.is_empty() => m.clone(),
            Some(m) => format!("{head}: {m}"),
            None => head,
        }
    }
}

/// Shows a task's progress.
pub struct Display {
    bar: Option<ProgressBar>,
    shown: Mutex<Shown>,
    last_line: Mutex<String>,
    quiet: bool,
}

impl Display {
    /// A display on stderr; `quiet` shows nothing.
    pub fn new(quiet: bool) -> Display {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(spinner_style());
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        Display {
            bar,
            shown: Mutex::new(Shown::default()),
            last_line: Mutex::new(String::new()),
            quiet,
        }
    }

    /// Shows one event.
    pub fn event(&self, e: &Event) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        match e {
            Event::Status(s) => {
                if shown.ended {
                    return;
                }
                apply_state(&mut shown, s);
            }
            Event::Progress {
                progress,
                total,
                message,
            } => {
                // A progress report can arrive after the final state: the end is what stays.
                if shown.ended {
                    return;
                }
                shown.done = Some(*progress);
                if total.is_some() {
                    shown.total = *total;
                }
                if message.is_some() {
                    shown.message = message.clone();
                }
            }
            Event::Log { level, data } => {
                let text = match data {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                drop(shown);
                self.line(&format!("[{level}] {text}"));
                return;
            }
            Event::Retrying { error, retry_in } => {
                drop(shown);
                // The error says which: a lost connection, a gateway's 5xx, a stopping server.
                self.line(&format!(
                    "server unavailable ({error}); trying again in {:.1} s",
                    retry_in.as_secs_f64()
                ));
                return;
            }
        }
        let snapshot = shown.clone();
        drop(shown);
        self.render(&snapshot);
    }

    fn render(&self, s: &Shown) {
        match &self.bar {
            Some(b) => {
                match (s.done, s.total) {
                    (Some(d), Some(t)) if t > 0.0 => {
                        // Whole units when the numbers are whole, else per mille.
                        let scale = if t.fract() == 0.0 && d.fract() == 0.0 {
                            1.0
                        } else {
                            1000.0 / t
                        };
                        if b.length().is_none() {
                            b.set_style(bar_style());
                        }
                        b.set_length((t * scale).round() as u64);
                        b.set_position((d * scale).round() as u64);
                    }
                    (Some(d), _) => b.set_position(d.round() as u64),
                    _ => {}
                }
                let mut text = s.text();
                if let (Some(d), Some(t)) = (s.done, s.total) {
                    // The bar shows the share; the numbers stay readable beside it.
                    text = text.replacen(&format!(" {d}/{t}"), "", 1);
                }
                b.set_message(text);
            }
            None => {
                let prefix = s
                    .task
                    .as_deref()
                    .map(|t| format!("task {t}: "))
                    .unwrap_or_default();
                self.change(&format!("{prefix}{}", s.text()));
            }
        }
    }

    /// Prints `text` unless it repeats the last line (polls repeat states).
    fn change(&self, text: &str) {
        let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        if *last != text {
            *last = text.to_string();
            if !self.quiet {
                eprintln!("{text}");
            }
        }
    }

    /// Prints a line above the bar.
    pub fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(b) => b.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// The bar, when there is one (prompts hide it while they are up).
    pub fn bar(&self) -> Option<ProgressBar> {
        self.bar.clone()
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

fn apply_state(shown: &mut Shown, s: &TaskState) {
    shown.task = Some(s.task_id.clone());
    shown.status = Some(s.status.as_str().to_string());
    if s.status_message.is_some() {
        shown.message = s.status_message.clone();
    }
    if s.progress.is_some() {
        shown.done = s.progress;
    }
    if s.progress_total.is_some() {
        shown.total = s.progress_total;
    }
    shown.ended = s.status.is_terminal();
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {elapsed} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {elapsed} [{bar:30}] {percent:>3}% {msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}
