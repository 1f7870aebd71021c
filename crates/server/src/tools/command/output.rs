//! A command's output as the tool reads it: lines (an over-long one as its head and the rest), and
//! the progress and status reports held back so that the latest within a window wins.

use mcp_tasks_engine::TaskContext;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

/// Longest line read as one: a directive longer than this is refused (see [`Piece::Head`]).
pub(super) const MAX_LINE: usize = 64 * 1024;

/// What a program's output stream delivers, a line at a time.
pub(super) enum Piece {
    /// A whole line (newline included, unless the stream ended without one).
    Line(Vec<u8>),
    /// The first [`MAX_LINE`] bytes of a line longer than that; the rest follows as `Rest`.
    Head(Vec<u8>),
    /// More of an over-long line (the last one ends with its newline).
    Rest(Vec<u8>),
}

/// Reads a stream in chunks and sends its lines, an over-long line as its head and then the rest.
pub(super) async fn read_lines(
    mut r: impl AsyncRead + Unpin,
    tx: mpsc::Sender<(bool, Piece)>,
    is_stdout: bool,
) {
    let mut buf = vec![0u8; 8192];
    let mut line = Vec::new();
    let mut overlong = false;
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            line.push(b);
            let piece = if b == b'\n' {
                let whole = std::mem::take(&mut line);
                Some(if std::mem::take(&mut overlong) {
                    Piece::Rest(whole)
                } else {
                    Piece::Line(whole)
                })
            } else if line.len() >= MAX_LINE {
                let part = std::mem::take(&mut line);
                Some(if std::mem::replace(&mut overlong, true) {
                    Piece::Rest(part)
                } else {
                    Piece::Head(part)
                })
            } else {
                None
            };
            if let Some(piece) = piece {
                if tx.send((is_stdout, piece)).await.is_err() {
                    return;
                }
            }
        }
    }
    if !line.is_empty() {
        let piece = if overlong {
            Piece::Rest(line)
        } else {
            Piece::Line(line)
        };
        let _ = tx.send((is_stdout, piece)).await;
    }
}

/// How often a command's progress and status reports reach the task at most: within a window the
/// latest wins, so a program that prints a line per item costs the store a write per window, not
/// per line.
const REPORT_EVERY: Duration = Duration::from_millis(100);

/// Progress and status reports not yet applied (the latest of each).
#[derive(Default)]
pub(super) struct Reports {
    pub(super) progress: Option<(f64, Option<f64>, Option<String>)>,
    pub(super) status: Option<String>,
    /// When the last reports were applied.
    applied: Option<tokio::time::Instant>,
}

impl Reports {
    /// Whether a report now goes out at once (none went out within the window).
    pub(super) fn due(&self) -> bool {
        self.applied.is_none_or(|t| t.elapsed() >= REPORT_EVERY)
    }

    /// When the held reports are to be applied, if any are held.
    pub(super) fn flush_at(&self) -> Option<tokio::time::Instant> {
        (self.progress.is_some() || self.status.is_some()).then(|| {
            self.applied
                .map_or_else(tokio::time::Instant::now, |t| t + REPORT_EVERY)
        })
    }

    /// Applies what is held: the status first (a message about what follows), then progress.
    pub(super) async fn apply(&mut self, ctx: &TaskContext) {
        if let Some(s) = self.status.take() {
            ctx.status(s).await;
        }
        if let Some((d, t, m)) = self.progress.take() {
            ctx.progress(d, t, m).await;
        }
        self.applied = Some(tokio::time::Instant::now());
    }
}
