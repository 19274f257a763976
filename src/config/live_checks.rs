//! One check of a version's `live_checks`: its raw JSON validated field by field and compiled into
//! a [`Check`], and for a rule check the [`Rule`] its stage's automaton is built from.

use crate::pattern::{compile_forbidden_text, compile_pattern, Rule, MAX_MATCH_LIMIT};

use super::compile::{valid_name, At, Compiler, NAME_RULE};
use super::raw::{RawCheck, RawMode, RawOnError, RawStage};
use super::{
    Alert, Check, Kind, Mode, Stage, DEFAULT_JUDGE_TIMEOUT_MS, DEFAULT_SAMPLE, MAX_JUDGE_TIMEOUT_MS,
};

impl Compiler<'_> {
    pub(super) fn check(
        &mut self,
        at: &At,
        value: serde_json::Value,
    ) -> Option<(Check, Option<Rule>)> {
        let raw: RawCheck = self.parse(at, value)?;
        let before = self.errors.len();
        let mut fail =
            |field: &str, message: String| self.errors.push(at.error(Some(field), message));
        if !valid_name(&raw.name) {
            fail("name", NAME_RULE.to_owned());
        }
        let stage = match raw.stage {
            RawStage::Input => Stage::Input,
            RawStage::Output => Stage::Output,
        };
        let mode = match raw.mode.unwrap_or(RawMode::Block) {
            RawMode::Block => Mode::Block,
            RawMode::Background => Mode::Background,
        };
        let kind = match raw.kind.as_str() {
            "not_contains" => Some(Kind::NotContains),
            "matches_pattern" => Some(Kind::MatchesPattern),
            "polite_tone" => Some(Kind::PoliteTone),
            "correct_format" => Some(Kind::CorrectFormat),
            "no_made_up_facts" => Some(Kind::NoMadeUpFacts),
            "custom_rule" => match &raw.expected {
                Some(rule) if !rule.trim().is_empty() => {
                    Some(Kind::CustomRule { rule: rule.clone() })
                }
                _ => {
                    fail(
                        "expected",
                        "a custom_rule check needs its rule in `expected`".to_owned(),
                    );
                    None
                }
            },
            "response_time" => {
                fail("kind", "response_time is not yet supported".to_owned());
                None
            }
            _ => {
                fail(
                    "kind",
                    "is not a known kind (not_contains, matches_pattern, polite_tone, correct_format, no_made_up_facts, custom_rule)"
                        .to_owned(),
                );
                None
            }
        };
        let mut rule = None;
        if let Some(kind) = &kind {
            let judged = !kind.is_rule();
            match kind {
                Kind::NotContains => match raw.expected.as_deref().map(compile_forbidden_text) {
                    None => fail(
                        "expected",
                        "a not_contains check needs `expected`".to_owned(),
                    ),
                    Some(Err(e)) => fail("expected", e.to_string()),
                    Some(Ok(r)) => rule = Some(r),
                },
                Kind::MatchesPattern => {
                    let max_match = raw.max_match.unwrap_or(MAX_MATCH_LIMIT);
                    match raw
                        .pattern
                        .as_deref()
                        .map(|p| compile_pattern(p, max_match))
                    {
                        None => fail(
                            "pattern",
                            "a matches_pattern check needs `pattern`".to_owned(),
                        ),
                        Some(Err(e @ crate::pattern::PatternError::MaxMatchOutOfRange { .. })) => {
                            fail("max_match", e.to_string())
                        }
                        Some(Err(e)) => fail("pattern", e.to_string()),
                        Some(Ok(r)) => rule = Some(r),
                    }
                }
                _ => {}
            }
            if raw.pattern.is_some() && *kind != Kind::MatchesPattern {
                fail(
                    "pattern",
                    "only a matches_pattern check has a pattern".to_owned(),
                );
            }
            if raw.max_match.is_some() && *kind != Kind::MatchesPattern {
                fail(
                    "max_match",
                    "only a matches_pattern check has max_match".to_owned(),
                );
            }
            if raw.expected.is_some()
                && matches!(
                    kind,
                    Kind::MatchesPattern
                        | Kind::PoliteTone
                        | Kind::CorrectFormat
                        | Kind::NoMadeUpFacts
                )
            {
                fail(
                    "expected",
                    format!("a {} check has no `expected`", kind.as_str()),
                );
            }
            if mode == Mode::Background && !(judged && stage == Stage::Output) {
                fail(
                    "mode",
                    "only a judged output check can run in the background".to_owned(),
                );
            }
            if !judged && raw.on_error.is_some() {
                fail(
                    "on_error",
                    "a rule check always decides; on_error applies to judged checks".to_owned(),
                );
            }
            if !judged && raw.judge_model.is_some() {
                fail(
                    "judge_model",
                    "only a judged check has a judge model".to_owned(),
                );
            }
        }
        if raw.recover == Some(true) && stage == Stage::Input {
            fail(
                "recover",
                "an input check cannot ask the model again; recovery is for output checks"
                    .to_owned(),
            );
        }
        if raw.recover == Some(true) && mode == Mode::Background {
            fail(
                "recover",
                "a background check never touches the turn, so it cannot recover".to_owned(),
            );
        }
        if raw.sample.is_some() && mode != Mode::Background {
            fail("sample", "only a background check is sampled".to_owned());
        }
        let sample = raw.sample.unwrap_or(DEFAULT_SAMPLE);
        if !(sample > 0.0 && sample <= 1.0) {
            fail("sample", "must be above 0 and at most 1".to_owned());
        }
        if let Some(alert) = raw.alert {
            if !(alert.failure_rate > 0.0 && alert.failure_rate <= 1.0) {
                fail(
                    "alert.failure_rate",
                    "must be above 0 and at most 1".to_owned(),
                );
            }
            if !(1..=1000).contains(&alert.over_last) {
                fail("alert.over_last", "must be 1 to 1000".to_owned());
            }
        }
        let timeout_ms = raw.timeout_ms.unwrap_or(DEFAULT_JUDGE_TIMEOUT_MS);
        if !(1..=MAX_JUDGE_TIMEOUT_MS).contains(&timeout_ms) {
            fail(
                "timeout_ms",
                format!("must be 1 to {MAX_JUDGE_TIMEOUT_MS} milliseconds"),
            );
        }
        if let Some(model) = &raw.judge_model {
            if model.trim().is_empty() {
                fail("judge_model", "must not be empty".to_owned());
            }
        }
        if self.errors.len() > before {
            return None;
        }
        let kind = kind?;
        let broken_rule = raw
            .description
            .clone()
            .or_else(|| raw.expected.clone())
            .unwrap_or_else(|| raw.name.clone());
        Some((
            Check {
                broken_rule,
                name: raw.name,
                stage,
                kind,
                mode,
                recover: raw.recover.unwrap_or(false),
                description: raw.description,
                sample,
                alert: raw.alert.map(|a| Alert {
                    failure_rate: a.failure_rate,
                    over_last: a.over_last,
                }),
                on_error_pass: raw.on_error == Some(RawOnError::Pass),
                judge_model: raw.judge_model,
                timeout_ms,
                counters: Default::default(),
                report_head: String::new(),
            },
            rule,
        ))
    }
}
