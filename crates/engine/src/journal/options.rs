//! Steps with a retry policy and a timeout ([`TaskContext::step_with`]): the tries, their backoff
//! and their timeout run inside the step, and only its outcome is recorded (the output, or the
//! failure it ended with), so a replay gets the same outcome without trying again.
//!
//! The tries of one step are not journaled one by one: a run stopped between two tries (a crash,
//! a hand-off) starts the step from its first try on the next run, as a body stopped half-way runs
//! again. What is recorded is final.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{millis_since, Ended};
use crate::context::{StepEntry, StepError, StepSlot, TaskContext};

/// Which errors of a step's body are worth another try ([`RetryPolicy::retry_if`]).
pub type Retryable<E> = Arc<dyn Fn(&E) -> bool + Send + Sync>;

/// Which tries of a step are made again, and after how long ([`StepOptions::retry`]).
pub struct RetryPolicy<E> {
    /// How many tries in all, the first included (1: no retry). At least one is made.
    pub max_attempts: u32,
    /// The wait before the second try.
    pub initial_delay: Duration,
    /// What each wait is multiplied by for the next (2.0: doubling). Below 1.0 counts as 1.0.
    pub backoff: f64,
    /// The longest wait between two tries.
    pub max_delay: Duration,
    /// Which errors are tried again (`None`: all of them); an error it answers `false` for ends
    /// the step at once, recorded as failed.
    pub retry_if: Option<Retryable<E>>,
    /// Whether a try that ran past [`StepOptions::timeout`] is tried again.
    pub retry_timeouts: bool,
}

impl<E> RetryPolicy<E> {
    /// One try, no retry.
    pub fn never() -> Self {
        RetryPolicy::attempts(1)
    }

    /// `max_attempts` tries in all, waiting 1 s before the second and doubling up to 60 s.
    pub fn attempts(max_attempts: u32) -> Self {
        RetryPolicy {
            max_attempts,
            initial_delay: Duration::from_secs(1),
            backoff: 2.0,
            max_delay: Duration::from_secs(60),
            retry_if: None,
            retry_timeouts: true,
        }
    }

    /// Waits `initial` before the second try, multiplied by `backoff` for each next one, never
    /// more than `max`.
    pub fn delays(mut self, initial: Duration, backoff: f64, max: Duration) -> Self {
        self.initial_delay = initial;
        self.backoff = backoff;
        self.max_delay = max;
        self
    }

    /// Tries again only the errors `retryable` answers `true` for.
    pub fn retry_if(mut self, retryable: impl Fn(&E) -> bool + Send + Sync + 'static) -> Self {
        self.retry_if = Some(Arc::new(retryable));
        self
    }

    /// Whether a try that timed out is tried again (by default it is).
    pub fn retry_timeouts(mut self, retry: bool) -> Self {
        self.retry_timeouts = retry;
        self
    }

    /// The wait after try `attempt` (1-based) failed, before the next.
    pub fn delay_after(&self, attempt: u32) -> Duration {
        let factor = self
            .backoff
            .max(1.0)
            .powi(i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX));
        Duration::try_from_secs_f64(self.initial_delay.as_secs_f64() * factor)
            .unwrap_or(self.max_delay)
            .min(self.max_delay)
    }

    fn retries(&self, failure: &Try<E>) -> bool {
        match failure {
            Try::Error(e) => self.retry_if.as_ref().is_none_or(|retryable| retryable(e)),
            Try::TimedOut => self.retry_timeouts,
        }
    }
}

impl<E> Default for RetryPolicy<E> {
    fn default() -> Self {
        RetryPolicy::never()
    }
}

impl<E> Clone for RetryPolicy<E> {
    fn clone(&self) -> Self {
        RetryPolicy {
            max_attempts: self.max_attempts,
            initial_delay: self.initial_delay,
            backoff: self.backoff,
            max_delay: self.max_delay,
            retry_if: self.retry_if.clone(),
            retry_timeouts: self.retry_timeouts,
        }
    }
}

impl<E> fmt::Debug for RetryPolicy<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("initial_delay", &self.initial_delay)
            .field("backoff", &self.backoff)
            .field("max_delay", &self.max_delay)
            .field("retry_if", &self.retry_if.as_ref().map(|_| "custom"))
            .field("retry_timeouts", &self.retry_timeouts)
            .finish()
    }
}

/// How [`TaskContext::step_with`] runs a step's body: its retries and the time each try may take.
pub struct StepOptions<E> {
    /// Which failed tries are made again, and when.
    pub retry: RetryPolicy<E>,
    /// How long one try may run (`None`: as long as it takes); a try past it is dropped and counts
    /// as failed.
    pub timeout: Option<Duration>,
}

impl<E> StepOptions<E> {
    /// One try, no timeout: like [`TaskContext::step`], with the failure recorded as such.
    pub fn new() -> Self {
        StepOptions {
            retry: RetryPolicy::never(),
            timeout: None,
        }
    }

    /// With `policy` for failed tries.
    pub fn retry(mut self, policy: RetryPolicy<E>) -> Self {
        self.retry = policy;
        self
    }

    /// With each try bounded by `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl<E> Default for StepOptions<E> {
    fn default() -> Self {
        StepOptions::new()
    }
}

impl<E> Clone for StepOptions<E> {
    fn clone(&self) -> Self {
        StepOptions {
            retry: self.retry.clone(),
            timeout: self.timeout,
        }
    }
}

impl<E> fmt::Debug for StepOptions<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepOptions")
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why [`TaskContext::step_with`] gave no output. `Failed` and `TimedOut` are recorded: every
/// later run of the task gets the same one without running the body.
#[derive(Debug, thiserror::Error)]
pub enum StepFailed<E> {
    /// The body failed for good: its last error, once the tries were spent or the policy did not
    /// try it again.
    #[error("step `{name}` failed after {attempts} tries: {error}")]
    Failed {
        /// The step.
        name: String,
        /// What the last try failed with.
        error: E,
        /// How many tries were made.
        attempts: u32,
    },
    /// The last try ran past the step's timeout.
    #[error("step `{name}` timed out after {timeout_ms} ms ({attempts} tries)")]
    TimedOut {
        /// The step.
        name: String,
        /// The timeout of one try, ms.
        timeout_ms: u64,
        /// How many tries were made.
        attempts: u32,
    },
    /// The journal could not replay or record the step, or the run was told to stop between two
    /// tries: nothing is recorded.
    #[error(transparent)]
    Journal(#[from] StepError),
}

/// How one try failed.
enum Try<E> {
    Error(E),
    TimedOut,
}

/// A failure as the journal keeps it (the step's recorded output).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Recorded<E> {
    Failed {
        error: E,
        attempts: u32,
    },
    #[serde(rename_all = "camelCase")]
    TimedOut {
        timeout_ms: u64,
        attempts: u32,
    },
}

impl<E> Recorded<E> {
    fn into_failed(self, name: &str) -> StepFailed<E> {
        let name = name.to_string();
        match self {
            Recorded::Failed { error, attempts } => StepFailed::Failed {
                name,
                error,
                attempts,
            },
            Recorded::TimedOut {
                timeout_ms,
                attempts,
            } => StepFailed::TimedOut {
                name,
                timeout_ms,
                attempts,
            },
        }
    }
}

fn serde_error(name: &str, e: serde_json::Error) -> StepError {
    StepError::Serde {
        name: name.to_string(),
        message: e.to_string(),
    }
}

impl TaskContext {
    /// Runs `body` as the journal's next step named `name`, like [`TaskContext::step`], with the
    /// tries and the timeout `options` give it: a failed try (an `Err`, or a try past the timeout)
    /// is made again as the policy says, and the step's outcome is recorded, be it the output or
    /// the failure it ended with. A later run replays either: a step that failed for good returns
    /// the same [`StepFailed`] without running the body again.
    ///
    /// `body` is called once per try with the try's number (1 for the first). A try past the
    /// timeout is dropped where it waits, so, as after a crash, it must be safe to run again. The
    /// waits between tries end early with [`StepError::Stopped`] when the run is told to stop.
    /// A plain call (not a task) makes the tries and records nothing.
    pub async fn step_with<T, E, F, Fut>(
        &self,
        name: &str,
        options: StepOptions<E>,
        mut body: F,
    ) -> Result<T, StepFailed<E>>
    where
        T: Serialize + DeserializeOwned,
        E: Serialize + DeserializeOwned + fmt::Display,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let journal = self.sink().journal();
        let mut place = None;
        if let Some(journal) = journal {
            let unreadable = |e: serde_json::Error| {
                let e = serde_error(name, e);
                journal.unreadable(&e);
                e
            };
            match journal.replay_step(name).await? {
                StepSlot::Recorded {
                    output,
                    error: None,
                } => return Ok(serde_json::from_value(output).map_err(unreadable)?),
                StepSlot::Recorded { output, .. } => {
                    let failure: Recorded<E> =
                        serde_json::from_value(output).map_err(unreadable)?;
                    return Err(failure.into_failed(name));
                }
                StepSlot::Run(seq) => place = Some((journal, seq)),
            }
        }
        // Ends the step however this future ends: returned, failed or dropped.
        let _ended = place.map(|(journal, seq)| Ended { journal, seq });
        let started = Instant::now();
        let outcome = self.tries(name, &options, &mut body).await?;
        let (output, error) = match &outcome {
            Ok(value) => (serde_json::to_value(value), None),
            Err(failure) => (serde_json::to_value(failure), Some(describe(name, failure))),
        };
        let output = output.map_err(|e| serde_error(name, e))?;
        if let Some((journal, seq)) = place {
            let entry = StepEntry {
                name: name.to_string(),
                output,
                error,
                duration_ms: millis_since(started),
            };
            journal.record_step(seq, entry).await?;
        }
        outcome.map_err(|failure| failure.into_failed(name))
    }

    /// Makes the tries `options` allow: the body's output, the failure to record, or a stop.
    async fn tries<T, E, F, Fut>(
        &self,
        name: &str,
        options: &StepOptions<E>,
        body: &mut F,
    ) -> Result<Result<T, Recorded<E>>, StepError>
    where
        E: fmt::Display,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let timeout_ms = options
            .timeout
            .map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        let mut attempt = 1;
        loop {
            let tried = match options.timeout {
                Some(limit) => match tokio::time::timeout(limit, body(attempt)).await {
                    Ok(result) => result.map_err(Try::Error),
                    Err(_) => Err(Try::TimedOut),
                },
                None => body(attempt).await.map_err(Try::Error),
            };
            let failure = match tried {
                Ok(value) => return Ok(Ok(value)),
                Err(failure) => failure,
            };
            if attempt >= options.retry.max_attempts || !options.retry.retries(&failure) {
                return Ok(Err(match failure {
                    Try::Error(error) => Recorded::Failed {
                        error,
                        attempts: attempt,
                    },
                    Try::TimedOut => Recorded::TimedOut {
                        timeout_ms,
                        attempts: attempt,
                    },
                }));
            }
            let delay = options.retry.delay_after(attempt);
            let why = match &failure {
                Try::Error(e) => e.to_string(),
                Try::TimedOut => format!("timed out after {timeout_ms} ms"),
            };
            tracing::info!(task = self.task_id().unwrap_or("-"), step = name, attempt, error = %why, retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "a step's try failed; trying again");
            tokio::select! {
                biased;
                () = self.cancelled() => return Err(StepError::Stopped),
                () = tokio::time::sleep(delay) => {}
            }
            attempt += 1;
        }
    }
}

/// A recorded failure in words, for the journal's `error`.
fn describe<E: fmt::Display>(name: &str, failure: &Recorded<E>) -> String {
    match failure {
        Recorded::Failed { error, attempts } => {
            format!("step `{name}` failed after {attempts} tries: {error}")
        }
        Recorded::TimedOut {
            timeout_ms,
            attempts,
        } => format!("step `{name}` timed out after {timeout_ms} ms ({attempts} tries)"),
    }
}
