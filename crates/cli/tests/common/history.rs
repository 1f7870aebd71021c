//! A history checker in Jepsen's manner: side effects recorded with the node and attempt that
//! made them and the time, and the invariants checked over the whole history: no two runs of one
//! task overlap in time, and each step ran once (or at most once more after a kill -9).

use std::collections::BTreeMap;

/// One recorded side effect.
#[derive(Clone, Debug, PartialEq)]
pub struct Effect {
    /// The task it was made for.
    pub task: String,
    /// The node (replica, process) that made it.
    pub node: String,
    /// The run of the task that made it.
    pub attempt: u64,
    /// When, in ns on the machine's clock (every process here shares it).
    pub at_ns: u128,
    /// The step it belongs to, when the effect is a step's.
    pub step: Option<String>,
}

/// A run: one (node, attempt) of a task, from its first effect to its last.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The node.
    pub node: String,
    /// The attempt.
    pub attempt: u64,
    /// Its first effect.
    pub first_ns: u128,
    /// Its last effect.
    pub last_ns: u128,
    /// How many effects it made.
    pub effects: usize,
}

/// Each task's runs, in the order they began.
pub fn runs(history: &[Effect]) -> BTreeMap<String, Vec<Run>> {
    let mut by: BTreeMap<(String, String, u64), Run> = BTreeMap::new();
    for e in history {
        let run = by
            .entry((e.task.clone(), e.node.clone(), e.attempt))
            .or_insert_with(|| Run {
                node: e.node.clone(),
                attempt: e.attempt,
                first_ns: e.at_ns,
                last_ns: e.at_ns,
                effects: 0,
            });
        run.first_ns = run.first_ns.min(e.at_ns);
        run.last_ns = run.last_ns.max(e.at_ns);
        run.effects += 1;
    }
    let mut tasks: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    for ((task, _, _), run) in by {
        tasks.entry(task).or_default().push(run);
    }
    for runs in tasks.values_mut() {
        runs.sort_by_key(|r| r.first_ns);
    }
    tasks
}

/// Fails, naming the runs, when two runs of one task overlap: one made an effect after another
/// had begun and before that one's last effect.
pub fn assert_no_overlap(history: &[Effect]) {
    for (task, runs) in runs(history) {
        for pair in runs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                a.last_ns < b.first_ns,
                "task {task}: run {} (attempt {}) went on {:.3} s into run {} (attempt {}): {runs:?}",
                a.node,
                a.attempt,
                (a.last_ns - b.first_ns) as f64 / 1e9,
                b.node,
                b.attempt,
            );
        }
    }
}

/// Fails when a step of a task ran more than `1 + extra` times (`extra`: 0 after clean stops, 1
/// for the step in flight at a kill -9).
pub fn assert_steps_once(history: &[Effect], extra: usize) {
    let mut count: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for e in history {
        if let Some(step) = &e.step {
            *count.entry((&e.task, step)).or_default() += 1;
        }
    }
    let again: usize = count.values().map(|n| n - 1).sum();
    assert!(
        again <= extra,
        "steps ran again {again} times (at most {extra}): {:?}",
        count.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
}
