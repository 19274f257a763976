//! The configuration's JSON Schema: `livecheck schema` prints what the config types generate, and the
//! checked-in copy editors point at is that. Its agreement with the compiler over whole configurations
//! is `tests/e2e/test_schema.py` (a JSON Schema validator and `livecheck lint`).
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::process::Command;

use livecheck::config::Policy;

const CHECKED_IN: &str = include_str!("../../schema/livecheck-config.schema.json");
const CASES_CHECKED_IN: &str = include_str!("../../schema/livecheck-cases.schema.json");
const SEED: &str = include_str!("../../examples/seed.json");

fn generated(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_livecheck"))
        .arg("schema")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_checked_in_case_file_schema_is_what_the_case_types_generate() {
    assert!(
        generated(&["cases"]) == CASES_CHECKED_IN,
        "schema/livecheck-cases.schema.json differs from what `livecheck test`'s case types \
         (cli/src/cases.rs) generate: regenerate it with `make schema` and commit it"
    );
}

#[test]
fn the_checked_in_schema_is_what_the_config_types_generate() {
    assert!(
        generated(&[]) == CHECKED_IN,
        "schema/livecheck-config.schema.json differs from what the config types (src/config/raw.rs) \
         generate: regenerate it with `make schema` \
         (cargo run -p livecheck-cli -- schema > schema/livecheck-config.schema.json) and commit it"
    );
}

fn seed_with(key: &str, value: serde_json::Value) -> Vec<u8> {
    let mut config: serde_json::Value = serde_json::from_str(SEED).unwrap();
    config[key] = value;
    serde_json::to_vec(&config).unwrap()
}

#[test]
fn a_schema_key_is_accepted_and_ignored_but_must_be_a_string() {
    let config = seed_with("$schema", "../schema/livecheck-config.schema.json".into());
    assert!(Policy::from_json(&config).is_ok());
    let errors = Policy::from_json(&seed_with("$schema", 1.into())).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field.as_deref(), Some("$schema"), "{errors:?}");
}

/// A config whose one check is of `kind`, with the fields that kind needs.
fn check_of_kind(kind: &str) -> Vec<u8> {
    let check = match kind {
        "not_contains" | "custom_rule" => serde_json::json!({"expected": "x"}),
        "matches_pattern" => serde_json::json!({"pattern": "a{2}"}),
        _ => serde_json::json!({}),
    };
    let mut check = check.as_object().unwrap().clone();
    check.insert("name".into(), "c".into());
    check.insert("stage".into(), "output".into());
    check.insert("kind".into(), kind.into());
    let config = serde_json::json!({"agents": {"a": {"published": "1", "versions": {"1": {
        "live_checks": [check]}}}}});
    serde_json::to_vec(&config).unwrap()
}

#[test]
fn every_kind_the_schema_names_compiles_and_no_other_does() {
    let schema: serde_json::Value = serde_json::from_str(CHECKED_IN).unwrap();
    let kinds = schema["definitions"]["Check"]["properties"]["kind"]["enum"]
        .as_array()
        .unwrap();
    assert_eq!(kinds.len(), 6);
    for kind in kinds {
        let kind = kind.as_str().unwrap();
        let compiled = Policy::from_json(&check_of_kind(kind));
        assert!(compiled.is_ok(), "{kind}: {compiled:?}");
    }
    for refused in ["response_time", "regex"] {
        let errors = Policy::from_json(&check_of_kind(refused)).unwrap_err();
        assert_eq!(errors[0].field.as_deref(), Some("kind"), "{errors:?}");
    }
}
