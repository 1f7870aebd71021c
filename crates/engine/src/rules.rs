//! How the engine words the outcomes it makes up itself. The engine knows no wire, so the server
//! supplies these rules; [`PlainRules`] stands in when it does not.

use serde_json::Value;

use crate::model::Outcome;

/// How the engine words outcomes it did not get from a handler; supplied by the server, which knows the wire.
pub trait OutcomeRules: Send + Sync + 'static {
    /// The outcome of a failure the engine detects itself: a handler panicked, a run was interrupted by a restart, a task expired waiting for input.
    fn failure(&self, message: String) -> Outcome;
    /// The status message of a task whose result reports a tool-level error (`Outcome::Result { is_error: true, .. }`), if one can be drawn from it.
    fn error_summary(&self, result: &Value) -> Option<String>;
}

/// The rules an engine uses when none are set: failures are `Outcome::Error` with code 0 and the
/// message, and no status message is drawn from a tool-level error.
///
/// Code 0 means "no wire code": a server sets its wire's rules with
/// [`EngineBuilder::outcome_rules`](crate::EngineBuilder::outcome_rules) so that failures carry the
/// code its clients expect and tool errors get a readable status message.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainRules;

impl OutcomeRules for PlainRules {
    fn failure(&self, message: String) -> Outcome {
        Outcome::Error {
            code: 0,
            message,
            data: None,
        }
    }

    fn error_summary(&self, _result: &Value) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_rules_fail_with_code_zero_and_draw_no_summary() {
        assert_eq!(
            PlainRules.failure("boom".into()),
            Outcome::Error {
                code: 0,
                message: "boom".into(),
                data: None
            }
        );
        assert_eq!(
            PlainRules.error_summary(&serde_json::json!({"anything": 1})),
            None
        );
    }
}
