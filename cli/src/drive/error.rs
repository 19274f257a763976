//! Why the filter does not load, and why a turn cannot run as written. Their own room so the
//! driving code reads top-down; each message is the one the commands have always printed
//! (operators and the CLI's tests read them), so `Display` is the wording and the variants are
//! what callers match on.

use std::fmt;

use livecheck::config::{ConfigError, SelectError};
use livecheck_harness::HarnessError;

use crate::http::HttpError;

/// Why [`super::Filter::load`] failed: `livecheck test` and `eval` print it and exit 2.
#[derive(Debug)]
pub enum LoadError {
    /// The `.wasm` or the policy cannot be read.
    Read {
        /// The file, as given.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The policy does not compile: every problem, one line each.
    Policy {
        /// The policy file, as given.
        path: String,
        /// The problems, as the filter would log them.
        errors: Vec<ConfigError>,
    },
    /// The `.wasm` does not compile.
    Compile {
        /// The `.wasm` file, as given.
        path: String,
        /// Why.
        error: HarnessError,
    },
    /// `--judge` is not a URL the client takes.
    Judge(HttpError),
    /// The VM's environment cannot hold the policy's judge token.
    Token {
        /// The policy file, as given.
        path: String,
        /// Why.
        error: TokenError,
    },
    /// The filter does not start with the policy.
    Start {
        /// The policy file, as given.
        path: String,
        /// Why.
        error: TurnError,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, error } => write!(f, "{path}: {error}"),
            Self::Policy { path, errors } => {
                let lines: Vec<String> = errors.iter().map(|e| format!("{path}: {e}")).collect();
                write!(f, "{}", lines.join("\n"))
            }
            Self::Compile { path, error } => write!(f, "{path}: {error}"),
            Self::Judge(error) => write!(f, "{error}"),
            Self::Token { path, error } => write!(f, "{path}: {error}"),
            Self::Start { path, error } => write!(f, "{path}: {error}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Why the policy's `judge_token_env` gives the VM no token.
#[derive(Debug)]
pub enum TokenError {
    /// The variable is not set and `--judge` asks a live sidecar, which checks it.
    Unset(String),
    /// The filter would refuse the token (the configuration error it would log; boxed, as it is
    /// large beside the other variants).
    Refused(Box<ConfigError>),
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unset(name) => write!(
                f,
                "the policy's judge_token_env names {name}, which is not set: with --judge the sidecar checks the token, so set {name} to the sidecar's [filter] token"
            ),
            Self::Refused(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for TokenError {}

/// What a `--judge` hint adds to a callout the case scripts no answer for.
const LIVE_HINT: &str = "or pass --judge URL for a live sidecar";

/// Why a turn cannot run as written (a case's `ERROR`, a suite line that could not run).
#[derive(Debug)]
pub enum TurnError {
    /// The policy selects no version for the turn.
    NoVersion(SelectError),
    /// `on_configure` refused the policy.
    Refused,
    /// The harness refused a step (names what was wrong).
    Harness(HarnessError),
    /// `--upstream` did not answer.
    Upstream(HttpError),
    /// The VM trapped during the turn.
    VmFailed,
    /// The turn ended and its report never came.
    NoReport,
    /// Callouts kept coming after every round was answered.
    EndlessCallouts,
    /// A callout to a path the sidecar does not serve.
    UnservedPath(String),
    /// A callout body that does not parse (`what`: "a report", "a judge request", …).
    Unparsable {
        /// What the filter sent.
        what: &'static str,
        /// Why it does not parse.
        error: serde_json::Error,
    },
    /// Several scripted checks or rows would get the same judge question.
    SameQuestion {
        /// "check" or "row".
        what: &'static str,
        /// The scripted ones, in order.
        named: Vec<String>,
    },
    /// A check or row was asked more often than the case scripts verdicts.
    TooFewVerdicts {
        /// "check" or "row".
        what: &'static str,
        /// Its name.
        name: String,
        /// How often it was asked, this time included.
        asked: usize,
    },
    /// A judge question for checks the case scripts no verdict for (names joined by " or ").
    UnscriptedCheck(String),
    /// A tool check for a row the case scripts no verdict for.
    UnscriptedTool,
    /// A retry the case scripts no answer for.
    UnscriptedRetry(u32),
    /// A callout nothing answers.
    Unanswered(String),
}

impl fmt::Display for TurnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hint = LIVE_HINT;
        match self {
            Self::NoVersion(e) => write!(f, "the policy has no version for this turn: {e:?}"),
            Self::Refused => write!(f, "the filter refused the policy when configured"),
            Self::Harness(e) => write!(f, "{e}"),
            Self::Upstream(e) => write!(f, "{e}"),
            Self::VmFailed => write!(f, "the filter's VM failed (a trap) during the turn"),
            Self::NoReport => write!(f, "the filter sent no report for the turn"),
            Self::EndlessCallouts => write!(f, "the filter kept making callouts"),
            Self::UnservedPath(path) => write!(
                f,
                "the filter made a callout to {path}, which no sidecar serves"
            ),
            Self::Unparsable { what, error } => {
                write!(f, "the filter sent {what} that does not parse: {error}")
            }
            Self::SameQuestion { what, named } => write!(
                f,
                "the {what}s {} send the judge the same question: the case cannot tell their \
                 verdicts apart (script only {})",
                named.join(", "),
                named.first().map(String::as_str).unwrap_or_default()
            ),
            Self::TooFewVerdicts { what, name, asked } => write!(
                f,
                "{what} {name} was asked {asked} times, and the case scripts fewer verdicts"
            ),
            Self::UnscriptedCheck(names) => write!(f, "the filter asked the judge about check {names}, and the case scripts no verdict for it (add `judge: {{{names}: passed}}`, {hint})"),
            Self::UnscriptedTool => write!(f, "the filter asked the judge about a tool call, and the case scripts no `tools` verdict for its row ({hint})"),
            Self::UnscriptedRetry(attempt) => write!(f, "the filter asked the model again (attempt {attempt}), and the case has no `retries` entry for it ({hint})"),
            Self::Unanswered(path) => write!(f, "nothing answers the callout to {path}"),
        }
    }
}

impl std::error::Error for TurnError {}

impl From<HarnessError> for TurnError {
    fn from(e: HarnessError) -> Self {
        Self::Harness(e)
    }
}

impl From<HttpError> for TurnError {
    fn from(e: HttpError) -> Self {
        Self::Upstream(e)
    }
}
