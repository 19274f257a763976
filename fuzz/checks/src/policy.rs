//! The configuration and pattern compiler. Mode 0: any bytes as a plugin configuration; never
//! panics, and what it accepts selects and scans. Mode 1: a pattern and its `max_match`; the
//! configuration holding it as a check is accepted exactly when the pattern compiler and the
//! stream automaton accept it (`livecheck lint` and the filter's `on_configure` both call
//! `Policy::from_json`), a refusal never quotes the pattern, and a stream checked by it shows the
//! caller exactly the text before the pattern's first match, however it is chunked.

use livecheck::api::Api;
use livecheck::config::Policy;
use livecheck::pattern::compile_pattern;
use livecheck::scan::RuleSet;
use livecheck::stream::{caller, Hold};
use serde_json::json;

use crate::rewrite;

fn any_config(bytes: &[u8]) {
    match Policy::from_json(bytes) {
        Ok(policy) => {
            let text = String::from_utf8_lossy(bytes);
            for (agent, a) in &policy.agents {
                for id in a.versions.keys() {
                    if let Ok(version) = policy.select(Some(agent), Some(id), None) {
                        version.input_rules.first_hit(&text);
                        version.output_rules.first_hit(&text);
                    }
                }
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "refused without a reason");
            assert!(
                errors.iter().all(|e| !e.message.is_empty()),
                "an empty reason"
            );
        }
    }
}

fn one_pattern(max_match: usize, pattern: &str, haystack: &str, chunk: usize) {
    let compiled = compile_pattern(pattern, max_match);
    let automaton = compiled
        .as_ref()
        .map(|rule| RuleSet::streamed(&[(0, rule.clone())]));
    let config = json!({"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
        "live_checks": [{"name": "p", "stage": "output", "kind": "matches_pattern",
                         "pattern": pattern, "max_match": max_match}]}}}}});
    let policy = Policy::from_json(config.to_string().as_bytes());
    match (&compiled, &automaton, &policy) {
        (Ok(_), Ok(Ok(_)), Ok(_)) => {}
        (Err(e), _, Err(errors)) => {
            if pattern.chars().count() >= 12 {
                let message = e.to_string();
                assert!(!message.contains(pattern), "a refusal quotes the pattern");
                assert!(
                    errors.iter().all(|c| !c.message.contains(pattern)),
                    "quoted"
                );
            }
        }
        (Ok(_), Ok(Err(_)), Err(_)) => {}
        _ => panic!(
            "the configuration and the pattern compiler disagree: {:?} / {:?}",
            compiled.is_ok(),
            policy.is_ok()
        ),
    }
    let Ok(policy) = policy else { return };
    let Ok(version) = policy.select(None, None, None) else {
        panic!("an accepted configuration selects no version");
    };
    let expected = match version.output_rules.first_hit(haystack) {
        Some(hit) => &haystack[..hit.start],
        None => haystack,
    };
    let chars: Vec<char> = haystack.chars().collect();
    let deltas: Vec<String> = chars
        .chunks(chunk % 5 + 1)
        .map(|c| c.iter().collect())
        .collect();
    let body = caller::upstream(Api::ChatCompletions, &deltas);
    let out = rewrite(
        Api::ChatCompletions,
        Hold::Rules,
        &version,
        &body,
        chunk + 1,
    );
    let seen = caller::decode(Api::ChatCompletions, &out).map(|d| d.text);
    assert_eq!(
        seen.as_deref(),
        Ok(expected),
        "the stream showed other than the text before the match"
    );
}

/// The target's body: panics when `input` breaks one of the properties above.
pub fn check(input: &[u8]) {
    let [mode, max_match, rest @ ..] = input else {
        return;
    };
    if mode.is_multiple_of(2) {
        return any_config(rest);
    }
    let text = String::from_utf8_lossy(rest);
    let (pattern, haystack) = text
        .split_once('\u{0}')
        .unwrap_or((&text, "NL91ABNA0417164300 password"));
    one_pattern(
        usize::from(*max_match % 64),
        pattern,
        haystack,
        usize::from(*mode / 2),
    );
}
