//! The report of a run: a Markdown table with the machine and versions in its header, the ratios the
//! targets are stated in, and PNG charts, under `docs/bench/`.

use anyhow::{Context, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::fmt::Write as _;
use std::path::Path;

use crate::disk::CommitCost;
use crate::load::{Figures, Mode};

/// One measured row.
pub struct Row {
    /// Target name.
    pub target: String,
    /// Wire label.
    pub wire: &'static str,
    /// Mode.
    pub mode: Mode,
    /// Figures.
    pub figures: Figures,
    /// Server resident memory after the mode, MiB (current, peak).
    pub rss: (f64, f64),
}

fn command_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The machine: cores and CPU model.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {model}")
}

/// The Markdown report.
pub fn markdown(
    rows: &[Row],
    clients: usize,
    ops: usize,
    versions: &[(String, String)],
    commit: &CommitCost,
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# mcp-tasks benchmark\n");
    let _ = writeln!(
        md,
        "Written by `cargo run --release -p mcp-tasks-bench` (see the README). Same harness, same run, \
         one target after another, each in its own process on 127.0.0.1; the load generator shares the \
         machine. Absolute figures on a shared machine are noise: compare the ratios. What one task \
         costs PostgreSQL (statements, round trips, commits, its CPU beside a pgbench insert) is in \
         [postgres-cost.md](postgres-cost.md), written by the `pg-cost` command; how the figures \
         moved, change by change, is in [history.md](history.md).\n"
    );
    let _ = writeln!(md, "- machine: {}", machine());
    let _ = writeln!(
        md,
        "- a durable commit on this machine's disk ({} in a row of a {}-byte write in place and \
         `fdatasync`, where the SQLite files go): p50 {:.0} µs, p99 {:.0} µs, {:.1} µs of CPU each. \
         The SQLite store pays one per writer group and the memory store none (see `src/disk.rs`)",
        commit.commits,
        crate::disk::WRITE,
        commit.p50_us,
        commit.p99_us,
        commit.cpu_us
    );
    let _ = writeln!(
        md,
        "- load: {clients} concurrent clients, {ops} operations per mode, a no-op task tool"
    );
    let _ = writeln!(
        md,
        "- mcp-tasks: commit {}; rustc: {}; node: {}",
        // The harness's own checkout, wherever the suite is run from.
        command_line(
            "git",
            &[
                "-C",
                env!("CARGO_MANIFEST_DIR"),
                "rev-parse",
                "--short",
                "HEAD"
            ]
        ),
        command_line("rustc", &["--version"]),
        command_line("node", &["--version"])
    );
    for (name, version) in versions {
        let _ = writeln!(md, "- {name}: {version}");
    }
    let _ = writeln!(
        md,
        "\n| target | wire | mode | ops | ops/s | p50 ms | p90 ms | p99 ms | errors | server CPU µs/op | polls/task | RSS MiB (peak) |"
    );
    let _ = writeln!(
        md,
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let f = &r.figures;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {:.0} | {} | {:.0} ({:.0}) |",
            r.target,
            r.wire,
            r.mode.label(),
            f.ops,
            f.rate,
            f.p50,
            f.p90,
            f.p99,
            f.errors,
            f.cpu_us,
            if r.mode == Mode::E2e {
                format!("{:.2}", f.polls)
            } else {
                "".into()
            },
            r.rss.0,
            r.rss.1
        );
    }
    let _ = writeln!(md, "\n## Ratios\n");
    let rate = |target: &str, mode: Mode| {
        rows.iter()
            .find(|r| name_matches(&r.target, target) && r.mode == mode)
            .map(|r| r.figures.rate)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "n/a".into(),
    };
    let _ = writeln!(md, "| comparison | create | get | e2e |");
    let _ = writeln!(md, "|---|---:|---:|---:|");
    let pairs = [
        (
            "mcp-tasks sqlite (2026-07-28) / rmcp 3",
            "mcp-tasks sqlite (2026",
            "rmcp",
        ),
        (
            "mcp-tasks sqlite (2025-11-25) / TypeScript SDK v1",
            "mcp-tasks sqlite (2025",
            "TypeScript",
        ),
        (
            "mcp-tasks sqlite (2025-11-25) / turul memory (2025-11-25)",
            "mcp-tasks sqlite (2025",
            "turul * memory (2025",
        ),
        (
            "mcp-tasks sqlite (2025-11-25) / turul sqlite (2025-11-25)",
            "mcp-tasks sqlite (2025",
            "turul * sqlite (2025",
        ),
        (
            "mcp-tasks sqlite (2026-07-28) / turul memory (2026-07-28)",
            "mcp-tasks sqlite (2026",
            "turul * memory (2026",
        ),
        (
            "mcp-tasks sqlite (2026-07-28) / turul sqlite (2026-07-28)",
            "mcp-tasks sqlite (2026",
            "turul * sqlite (2026",
        ),
        (
            "mcp-tasks memory (2025-11-25) / ceiling",
            "mcp-tasks memory (2025",
            "ceiling",
        ),
        (
            "mcp-tasks sqlite (2025-11-25) / mcp-tasks memory (2025-11-25)",
            "mcp-tasks sqlite (2025",
            "mcp-tasks memory (2025",
        ),
        (
            "mcp-tasks sqlite (2026-07-28) / mcp-tasks memory (2026-07-28)",
            "mcp-tasks sqlite (2026",
            "mcp-tasks memory (2026",
        ),
        (
            "mcp-tasks postgres (2025-11-25) / mcp-tasks sqlite (2025-11-25)",
            "mcp-tasks postgres (2025",
            "mcp-tasks sqlite (2025",
        ),
        (
            "mcp-tasks postgres (2026-07-28) / mcp-tasks sqlite (2026-07-28)",
            "mcp-tasks postgres (2026",
            "mcp-tasks sqlite (2026",
        ),
        (
            "mcp-tasks postgres ×3 (2025-11-25) / mcp-tasks postgres (2025-11-25)",
            "mcp-tasks postgres ×3 (2025",
            "mcp-tasks postgres (2025",
        ),
        (
            "mcp-tasks postgres ×3 (2026-07-28) / mcp-tasks postgres (2026-07-28)",
            "mcp-tasks postgres ×3 (2026",
            "mcp-tasks postgres (2026",
        ),
    ];
    for (label, a, b) in pairs {
        let cells: Vec<String> = Mode::ALL
            .iter()
            .map(|m| ratio(rate(a, *m), rate(b, *m)))
            .collect();
        let _ = writeln!(md, "| {label} | {} |", cells.join(" | "));
    }
    let _ = writeln!(
        md,
        "\n![throughput](throughput.png)\n\n![p99 latency](latency-p99.png)\n"
    );
    md
}

/// Whether target `name` matches `pattern`: a prefix of it, or, with one `*`, the part before it as
/// a prefix and the part after it somewhere after that (`turul * memory (2025` matches
/// `turul 0.4.5 memory (2025-11-25)`, whatever the version).
fn name_matches(name: &str, pattern: &str) -> bool {
    match pattern.split_once('*') {
        Some((head, tail)) => name
            .strip_prefix(head)
            .is_some_and(|rest| rest.contains(tail)),
        None => name.starts_with(pattern),
    }
}

/// Grouped bar charts of throughput and p99 latency per mode, one bar per target.
pub fn charts(rows: &[Row], dir: &Path) -> Result<()> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow::anyhow!("cannot load the chart font"))?;
    let mut targets: Vec<String> = Vec::new();
    for r in rows {
        if !targets.contains(&r.target) {
            targets.push(r.target.clone());
        }
    }
    let value = |t: &str, m: Mode, f: fn(&Figures) -> f64| {
        rows.iter()
            .find(|r| r.target == t && r.mode == m)
            .map_or(0.0, |r| f(&r.figures))
    };
    bar_chart(
        &dir.join("throughput.png"),
        "Throughput (operations/s, higher is better)",
        &targets,
        |t, m| value(t, m, |f| f.rate),
    )?;
    bar_chart(
        &dir.join("latency-p99.png"),
        "p99 latency (ms, lower is better)",
        &targets,
        |t, m| value(t, m, |f| f.p99),
    )?;
    Ok(())
}

fn bar_chart(
    path: &Path,
    title: &str,
    targets: &[String],
    value: impl Fn(&str, Mode) -> f64,
) -> Result<()> {
    let root = BitMapBackend::new(path, (1100, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let group = targets.len() as f64 + 1.0;
    let max = Mode::ALL
        .iter()
        .flat_map(|m| targets.iter().map(move |t| (t, m)))
        .map(|(t, m)| value(t, *m))
        .fold(0.0_f64, f64::max)
        .max(1e-9);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..(group * Mode::ALL.len() as f64), 0.0..max * 1.15)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(("sans-serif", 15))
        .draw()?;
    // The mode under the middle of its group of bars.
    for (i, m) in Mode::ALL.iter().enumerate() {
        let middle = i as f64 * group + group / 2.0;
        let (px, py) = chart.plotting_area().map_coordinate(&(middle, 0.0));
        let style =
            TextStyle::from(("sans-serif", 18).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(m.label(), (px, py + 10), style))?;
    }
    for (k, t) in targets.iter().enumerate() {
        let color = Palette99::pick(k).mix(0.9);
        let bars = Mode::ALL.iter().enumerate().map(|(i, m)| {
            let x0 = i as f64 * group + k as f64 + 0.5;
            Rectangle::new([(x0, 0.0), (x0 + 0.9, value(t, *m))], color.filled())
        });
        chart
            .draw_series(bars)?
            .label(t.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}
