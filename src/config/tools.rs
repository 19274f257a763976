//! A version's tool-call checks: `allowed_tools` and the `tool_checks` rows, validated and compiled.
//!
//! Rows only deny. A row applies to the calls whose tool name its `tool` glob matches; it tests the
//! call with a judged `when` condition or with `args` rules decided in the filter.

use crate::check::ToolResult;
use crate::pattern::{compile_forbidden_text, compile_pattern, PatternError, MAX_MATCH_LIMIT};
use crate::scan::RuleSet;

use super::compile::{valid_name, At, Compiler, NAME_RULE};
use super::glob::Glob;
use super::raw::{RawArgRule, RawToolCheck};
use super::MAX_JUDGE_TIMEOUT_MS;

/// How long the judge may take on a `when` row unless it says otherwise.
pub const DEFAULT_TOOL_TIMEOUT_MS: u64 = 60_000;
/// The name results and the `X-Core-Check` header give a call `allowed_tools` denied.
pub const ALLOWED_TOOLS: &str = "allowed_tools";

/// A version's tool-call checks.
#[derive(Debug, Default)]
pub struct ToolChecks {
    /// `allowed_tools`: when set, a call to a tool no glob matches is denied at once.
    pub allowed: Option<Vec<Glob>>,
    pub rows: Vec<ToolRow>,
    /// The metric names of `allowed_tools`' results (see [`ToolRow::counters`]).
    pub allowed_counters: [String; 3],
}

impl ToolChecks {
    /// Whether any call is checked at all.
    pub fn any(&self) -> bool {
        self.allowed.is_some() || !self.rows.is_empty()
    }
}

/// A tool result names its row by its place in these checks (`check` knows no configuration), so
/// what the row is called and where it counts is read here.
impl ToolResult {
    /// The row's name, kind (`allowed_tools`, `tool_args` or `tool_when`) and the metric this
    /// result counts in; `None` for a row `tools` does not have.
    pub fn decider<'t>(&self, tools: &'t ToolChecks) -> Option<(&'t str, &'static str, &'t str)> {
        let (name, kind, counters) = match self.row {
            None => (ALLOWED_TOOLS, ALLOWED_TOOLS, &tools.allowed_counters),
            Some(row) => {
                let row = tools.rows.get(row)?;
                (row.name.as_str(), row.test.kind(), &row.counters)
            }
        };
        Some((name, kind, self.outcome.counter(counters)))
    }
}

#[derive(Debug)]
pub struct ToolRow {
    pub name: String,
    pub tool: Glob,
    pub test: ToolTest,
    /// Shown to the agent when the row denies a call.
    pub reason: Option<String>,
    pub judge_model: Option<String>,
    pub timeout_ms: u64,
    pub recover: bool,
    /// `livecheck.<agent>.<row>.<passed|failed|errored>`.
    pub counters: [String; 3],
}

#[derive(Debug)]
pub enum ToolTest {
    /// A plain-language condition: the judge says whether it holds.
    When(String),
    /// Rules over the arguments: the first that matches denies.
    Args(Vec<ArgRule>),
}

impl ToolTest {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::When(_) => "tool_when",
            Self::Args(_) => "tool_args",
        }
    }
}

/// One rule over a call's arguments: the text at `pointer` (every string, number and key under
/// it) must not match.
#[derive(Debug)]
pub struct ArgRule {
    pub pointer: String,
    pub rule: RuleSet,
}

/// Tool names and globs: what a model may name a tool, plus the two wildcards.
fn valid_glob(glob: &str) -> bool {
    !glob.is_empty()
        && glob.len() <= 128
        && glob.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '*' | '?')
        })
}

const GLOB_RULE: &str =
    "must be a tool name or glob: 1 to 128 characters of letters, digits, `-`, `_`, `.`, `:`, `/`, `*` or `?`";

impl Compiler<'_> {
    /// `allowed_tools` and `tool_checks` of a version. `taken`: the names of its live checks (a
    /// row's name is what the `X-Core-Check` header names, so it must be unique among them).
    pub(super) fn tool_checks(
        &mut self,
        at: &At,
        agent: &str,
        allowed: Option<Vec<String>>,
        rows: Vec<serde_json::Value>,
        taken: &[&str],
    ) -> ToolChecks {
        let allowed = allowed.map(|globs| {
            for (i, glob) in globs.iter().enumerate() {
                if !valid_glob(glob) {
                    self.errors
                        .push(at.error(Some(&format!("allowed_tools[{i}]")), GLOB_RULE.to_owned()));
                }
            }
            globs.iter().map(|g| Glob::new(g)).collect()
        });
        let mut compiled: Vec<ToolRow> = Vec::new();
        for (i, value) in rows.into_iter().enumerate() {
            let name = value
                .get("name")
                .and_then(|n| n.as_str())
                .map_or_else(|| format!("tool_checks[{i}]"), str::to_owned);
            let at = At {
                check: Some(name),
                ..at.clone()
            };
            let Some(row) = self.tool_row(&at, value) else {
                continue;
            };
            let clash = taken.contains(&row.name.as_str())
                || compiled.iter().any(|r| r.name == row.name)
                || row.name == ALLOWED_TOOLS;
            if clash {
                self.errors.push(at.error(
                    Some("name"),
                    "is used by another check or tool check of this version (or is `allowed_tools`)",
                ));
                continue;
            }
            compiled.push(row);
        }
        for row in &mut compiled {
            row.counters = counters(agent, &row.name);
        }
        ToolChecks {
            allowed,
            rows: compiled,
            allowed_counters: counters(agent, ALLOWED_TOOLS),
        }
    }

    fn tool_row(&mut self, at: &At, value: serde_json::Value) -> Option<ToolRow> {
        let raw: RawToolCheck = self.parse(at, value)?;
        let before = self.errors.len();
        let mut fail =
            |field: &str, message: String| self.errors.push(at.error(Some(field), message));
        if !valid_name(&raw.name) {
            fail("name", NAME_RULE.to_owned());
        }
        let tool = raw.tool.as_deref().unwrap_or("*");
        if !valid_glob(tool) {
            fail("tool", GLOB_RULE.to_owned());
        }
        let test = match (raw.when, raw.args) {
            (Some(when), None) if when.trim().is_empty() => {
                fail("when", "must not be empty".to_owned());
                None
            }
            (Some(when), None) => Some(ToolTest::When(when)),
            (None, Some(args)) if args.is_empty() => {
                fail("args", "needs at least one rule".to_owned());
                None
            }
            (None, Some(args)) => {
                let mut rules = Vec::new();
                for (i, arg) in args.into_iter().enumerate() {
                    match arg_rule(arg) {
                        Ok(rule) => rules.push(rule),
                        Err((field, message)) => fail(&format!("args[{i}].{field}"), message),
                    }
                }
                Some(ToolTest::Args(rules))
            }
            (Some(_), Some(_)) => {
                fail(
                    "when",
                    "a tool check has either `when` or `args`, not both".to_owned(),
                );
                None
            }
            (None, None) => {
                fail(
                    "when",
                    "a tool check needs `when` (judged) or `args` (rules)".to_owned(),
                );
                None
            }
        };
        let judged = matches!(test, Some(ToolTest::When(_)));
        if raw.judge_model.is_some() && !judged {
            fail("judge_model", "only a `when` row is judged".to_owned());
        }
        if raw.timeout_ms.is_some() && !judged {
            fail("timeout_ms", "only a `when` row is judged".to_owned());
        }
        if raw
            .judge_model
            .as_deref()
            .is_some_and(|m| m.trim().is_empty())
        {
            fail("judge_model", "must not be empty".to_owned());
        }
        if raw.reason.as_deref().is_some_and(|r| r.trim().is_empty()) {
            fail("reason", "must not be empty".to_owned());
        }
        let timeout_ms = raw.timeout_ms.unwrap_or(DEFAULT_TOOL_TIMEOUT_MS);
        if !(1..=MAX_JUDGE_TIMEOUT_MS).contains(&timeout_ms) {
            fail(
                "timeout_ms",
                format!("must be 1 to {MAX_JUDGE_TIMEOUT_MS} milliseconds"),
            );
        }
        if self.errors.len() > before {
            return None;
        }
        Some(ToolRow {
            name: raw.name,
            tool: Glob::new(tool),
            test: test?,
            reason: raw.reason,
            judge_model: raw.judge_model,
            timeout_ms,
            recover: raw.recover.unwrap_or(false),
            counters: Default::default(),
        })
    }
}

fn counters(agent: &str, name: &str) -> [String; 3] {
    ["passed", "failed", "errored"].map(|outcome| format!("livecheck.{agent}.{name}.{outcome}"))
}

/// One `args` rule, compiled; the field at fault and why otherwise.
fn arg_rule(raw: RawArgRule) -> Result<ArgRule, (&'static str, String)> {
    if !(raw.pointer.is_empty() || raw.pointer.starts_with('/')) {
        return Err((
            "pointer",
            "must be a JSON pointer: empty (all the arguments) or starting with `/`".to_owned(),
        ));
    }
    let rule = match (raw.not_contains, raw.pattern) {
        (Some(text), None) => {
            if raw.max_match.is_some() {
                return Err(("max_match", "only a `pattern` has max_match".to_owned()));
            }
            compile_forbidden_text(&text).map_err(|e| ("not_contains", e.to_string()))?
        }
        (None, Some(pattern)) => {
            compile_pattern(&pattern, raw.max_match.unwrap_or(MAX_MATCH_LIMIT)).map_err(
                |e| match e {
                    PatternError::MaxMatchOutOfRange { .. } => ("max_match", e.to_string()),
                    _ => ("pattern", e.to_string()),
                },
            )?
        }
        _ => {
            return Err((
                "not_contains",
                "an args rule has either `not_contains` or `pattern`".to_owned(),
            ))
        }
    };
    let rule = RuleSet::new(&[(0, rule)]).map_err(|e| ("pattern", e.to_string()))?;
    Ok(ArgRule {
        pointer: raw.pointer,
        rule,
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn globs_match_names() {
        let cases = [
            ("send_email", "send_email", true),
            ("send_email", "send_emails", false),
            ("send_*", "send_email", true),
            ("send_*", "send_", true),
            ("send_*", "sen", false),
            ("*", "", true),
            ("*_email", "send_email", true),
            ("*mail*", "send_email_now", true),
            ("s?nd", "send", true),
            ("s?nd", "snd", false),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
            ("github/*", "github/create_issue", true),
            // `?` is one character, however many bytes it takes.
            ("s?nd", "sénd", true),
            ("s??nd", "sénd", false),
            ("*_é", "send_é", true),
            ("send_*", "sénd_email", false),
        ];
        for (glob, name, expected) in cases {
            assert_eq!(Glob::new(glob).matches(name), expected, "{glob} vs {name}");
        }
    }
}
