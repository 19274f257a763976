use super::*;

const SEED: &str = include_str!("../../examples/seed.json");

/// A one-agent, one-version config around the given checks.
fn with_checks(checks: &str) -> String {
    format!(
        r#"{{"agents": {{"a": {{"published": "1", "versions": {{"1": {{"live_checks": [{checks}]}}}}}}}}}}"#
    )
}

fn errors(json: &str) -> Vec<String> {
    match Policy::from_json(json.as_bytes()) {
        Ok(_) => Vec::new(),
        Err(errs) => errs.iter().map(ToString::to_string).collect(),
    }
}

fn one_error(json: &str) -> String {
    let errs = errors(json);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    errs.into_iter().next().unwrap()
}

#[test]
fn seed_example_compiles() {
    let policy = Policy::from_json(SEED.as_bytes()).unwrap();
    let v = policy.select(None, None, None).unwrap();
    assert_eq!((v.agent.as_str(), v.id.as_str()), ("orders", "1"));
    assert_eq!(v.checks.len(), 3);
    assert_eq!(v.recover_attempts, 2);
    assert_eq!(v.input_rules.longest(), 8);
    assert_eq!(v.output_rules.longest(), 18);
    let polite = &v.checks[2];
    assert_eq!((polite.mode, polite.sample), (Mode::Background, 0.2));
}

#[test]
fn defaults_fill_what_the_operator_left_out() {
    let policy = Policy::from_json(with_checks("").as_bytes()).unwrap();
    assert_eq!(policy.agent_header, DEFAULT_AGENT_HEADER);
    assert_eq!(policy.version_header, DEFAULT_VERSION_HEADER);
    assert_eq!(policy.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    assert_eq!(
        policy.stream_frame_bytes, None,
        "no padding unless asked for"
    );
    let v = policy.select(Some("a"), None, None).unwrap();
    assert_eq!(v.recover_attempts, DEFAULT_RECOVER_ATTEMPTS);
    assert_eq!(v.blocked_reply, DEFAULT_BLOCKED_REPLY);
}

#[test]
fn every_problem_is_reported_with_its_place() {
    let json = with_checks(
        r#"{"name": "x", "stage": "input", "kind": "not_contains", "expected": "a", "recover": true},
           {"name": "y", "stage": "output", "kind": "matches_pattern", "pattern": "a.*"}"#,
    );
    let errs = errors(&json);
    assert_eq!(
        errs,
        vec![
            r#"config: agent "a" version "1" check "x" field `recover`: an input check cannot ask the model again; recovery is for output checks"#,
            r#"config: agent "a" version "1" check "y" field `pattern`: has no longest match (an unbounded repetition such as `*`, `+` or `{n,}`); bound it"#,
        ]
    );
}

#[test]
fn unknown_fields_and_kinds_are_refused() {
    let e = one_error(&with_checks(
        r#"{"name": "x", "stage": "input", "kind": "not_contains", "expected": "a", "colour": 1}"#,
    ));
    assert!(
        e.contains(r#"check "x""#) && e.contains("unknown field `colour`"),
        "{e}"
    );
    let e = one_error(&with_checks(
        r#"{"name": "x", "stage": "input", "kind": "vibes"}"#,
    ));
    assert!(e.contains("field `kind`: is not a known kind"), "{e}");
    let e = one_error(&with_checks(
        r#"{"name": "x", "stage": "middle", "kind": "polite_tone"}"#,
    ));
    assert!(e.contains("field `stage`") && !e.contains("middle"), "{e}");
    let e = one_error(r#"{"agents": {}, "extra": true}"#);
    assert!(e.contains("unknown field `extra`"), "{e}");
}

#[test]
fn wrong_types_name_the_field_and_never_quote_the_value() {
    let e = one_error(&with_checks(
        r#"{"name": "x", "stage": "output", "kind": "matches_pattern", "pattern": "a", "max_match": "secret"}"#,
    ));
    assert!(e.contains("field `max_match`: invalid type"), "{e}");
    assert!(!e.contains("secret"), "{e}");
}

#[test]
fn duplicate_check_names_are_refused() {
    let e = one_error(&with_checks(
        r#"{"name": "x", "stage": "input", "kind": "not_contains", "expected": "a"},
           {"name": "x", "stage": "output", "kind": "not_contains", "expected": "b"}"#,
    ));
    assert!(
        e.contains(r#"check "x" field `name`: is used by another check"#),
        "{e}"
    );
}

#[test]
fn response_time_is_not_yet_supported() {
    let e = one_error(&with_checks(
        r#"{"name": "t", "stage": "output", "kind": "response_time"}"#,
    ));
    assert!(e.contains("response_time is not yet supported"), "{e}");
}

#[test]
fn background_mode_is_only_for_judged_output_checks() {
    for check in [
        r#"{"name": "x", "stage": "output", "kind": "not_contains", "expected": "a", "mode": "background"}"#,
        r#"{"name": "x", "stage": "input", "kind": "polite_tone", "mode": "background"}"#,
    ] {
        let e = one_error(&with_checks(check));
        assert!(
            e.contains("field `mode`: only a judged output check"),
            "{e}"
        );
    }
    assert!(errors(&with_checks(
        r#"{"name": "x", "stage": "output", "kind": "polite_tone", "mode": "background"}"#
    ))
    .is_empty());
}

#[test]
fn pattern_problems_name_the_pattern_field_and_never_quote_it() {
    let cases = [
        (r#""pattern": "(a)\\1""#, "is not RE2 syntax"),
        (r#""pattern": "a(?=b)""#, "is not RE2 syntax"),
        (r#""pattern": "\\w+""#, "has no longest match"),
        (
            r#""pattern": "\\d{19}", "max_match": 18"#,
            "more than max_match 18",
        ),
        (r#""pattern": "z?""#, "matches the empty text"),
    ];
    for (fields, expected) in cases {
        let json = with_checks(&format!(
            r#"{{"name": "p", "stage": "output", "kind": "matches_pattern", {fields}}}"#
        ));
        let e = one_error(&json);
        assert!(e.contains("field `pattern`") && e.contains(expected), "{e}");
    }
    let long = "a".repeat(501);
    let e = one_error(&with_checks(&format!(
        r#"{{"name": "p", "stage": "output", "kind": "matches_pattern", "pattern": "{long}"}}"#
    )));
    assert!(e.contains("at most 500"), "{e}");
}

#[test]
fn max_match_over_200_is_refused() {
    let e = one_error(&with_checks(
        r#"{"name": "p", "stage": "output", "kind": "matches_pattern", "pattern": "a", "max_match": 201}"#,
    ));
    assert!(
        e.contains("field `max_match`: max_match 201 is out of range"),
        "{e}"
    );
}

#[test]
fn sample_and_alert_bounds_are_enforced() {
    let judged = |extra: &str| {
        with_checks(&format!(
            r#"{{"name": "j", "stage": "output", "kind": "polite_tone", "mode": "background", {extra}}}"#
        ))
    };
    for bad in [r#""sample": 0"#, r#""sample": 1.5"#, r#""sample": -0.1"#] {
        assert!(one_error(&judged(bad)).contains("field `sample`"), "{bad}");
    }
    assert!(errors(&judged(r#""sample": 1"#)).is_empty());
    let e = one_error(&judged(r#""alert": {"failure_rate": 0, "over_last": 50}"#));
    assert!(e.contains("field `alert.failure_rate`"), "{e}");
    let e = one_error(&judged(
        r#""alert": {"failure_rate": 0.5, "over_last": 1001}"#,
    ));
    assert!(e.contains("field `alert.over_last`"), "{e}");
    assert!(errors(&judged(
        r#""alert": {"failure_rate": 1, "over_last": 1000}"#
    ))
    .is_empty());
}

#[test]
fn recover_attempts_are_one_to_three() {
    let json =
        r#"{"agents": {"a": {"published": "1", "versions": {"1": {"recover_attempts": 4}}}}}"#;
    assert!(one_error(json).contains(r#"version "1" field `recover_attempts`"#));
}

#[test]
fn rule_checks_take_no_judge_settings() {
    let e = one_error(&with_checks(
        r#"{"name": "x", "stage": "input", "kind": "not_contains", "expected": "a", "on_error": "pass"}"#,
    ));
    assert!(e.contains("field `on_error`"), "{e}");
}

#[test]
fn published_version_and_default_agent_must_exist() {
    let e = one_error(r#"{"agents": {"a": {"published": "9", "versions": {"1": {}}}}}"#);
    assert!(e.contains(r#"agent "a" field `published`"#), "{e}");
    let e = one_error(
        r#"{"default_agent": "b", "agents": {"a": {"published": "1", "versions": {"1": {}}}}}"#,
    );
    assert!(e.contains("field `default_agent`"), "{e}");
}

#[test]
fn a_problem_without_a_place_reads_plainly() {
    assert_eq!(one_error("{}"), "config: missing field `agents`");
}

#[test]
fn bad_json_says_where() {
    let e = one_error("{\"agents\": ");
    assert!(e.contains("not valid JSON (line 1"), "{e}");
}

#[test]
fn a_host_with_a_star_names_the_agent_of_every_host_it_matches_an_exact_host_first() {
    let json = r#"{
        "default_agent": "a",
        "hosts": {
            "*.openai.azure.com": "azure",
            "prod.openai.azure.com": "a",
            "eu*.openai.azure.com": "b",
            "bedrock-runtime.*.amazonaws.com": "b"
        },
        "agents": {
            "a": {"published": "1", "versions": {"1": {}}},
            "b": {"published": "1", "versions": {"1": {}}},
            "azure": {"published": "1", "versions": {"1": {}}}
        }
    }"#;
    let p = Policy::from_json(json.as_bytes()).unwrap();
    let agent = |host| p.select(None, None, Some(host)).map(|v| v.agent.clone());
    assert_eq!(agent("my-res.openai.azure.com:443"), Ok("azure".into()));
    assert_eq!(agent("prod.openai.azure.com"), Ok("a".into()), "exact wins");
    assert_eq!(
        agent("eu-1.openai.azure.com"),
        Ok("b".into()),
        "longest glob"
    );
    assert_eq!(
        agent("bedrock-runtime.us-east-1.amazonaws.com"),
        Ok("b".into())
    );
    assert_eq!(
        agent("a.b.openai.azure.com"),
        Ok("a".into()),
        "one label: default"
    );
    assert_eq!(agent("openai.azure.com"), Ok("a".into()));
}

#[test]
fn every_bad_host_pattern_is_its_own_error() {
    let errs = errors(
        r#"{
        "hosts": {"*.*.azure.com": "a", "example.*": "a", "*..com": "a"},
        "agents": {"a": {"published": "1", "versions": {"1": {}}}}
    }"#,
    );
    assert_eq!(errs.len(), 3, "{errs:#?}");
    assert!(
        errs[0].contains(r#"host "*.*.azure.com" may hold one `*` only"#),
        "{errs:#?}"
    );
    assert!(
        errs[1].contains(r#"host "*..com" is not a host name"#),
        "{errs:#?}"
    );
    assert!(
        errs[2].contains(r#"host "example.*" may not hold its `*` in the last label"#),
        "{errs:#?}"
    );
}

#[test]
fn select_by_header_then_host_then_default() {
    let json = r#"{
        "default_agent": "a",
        "hosts": {"b.example.com": "b"},
        "agents": {
            "a": {"published": "1", "versions": {"1": {}}},
            "b": {"published": "2", "versions": {"2": {}, "3": {"blocked_reply": "draft"}}}
        }
    }"#;
    let p = Policy::from_json(json.as_bytes()).unwrap();
    let pick = |agent, version, host| {
        p.select(agent, version, host)
            .map(|v| (v.agent.clone(), v.id.clone()))
    };
    assert_eq!(pick(Some("b"), None, None), Ok(("b".into(), "2".into())));
    assert_eq!(
        pick(None, None, Some("b.example.com:8443")),
        Ok(("b".into(), "2".into()))
    );
    assert_eq!(
        pick(None, None, Some("other")),
        Ok(("a".into(), "1".into()))
    );
    assert_eq!(
        pick(Some("b"), Some("3"), None),
        Ok(("b".into(), "3".into()))
    );
    assert_eq!(
        pick(Some("b"), Some("7"), None),
        Err(SelectError::UnknownVersion)
    );
    assert_eq!(pick(Some("zz"), None, None), Err(SelectError::UnknownAgent));
}

#[test]
fn no_agent_and_no_default_is_an_error_not_a_pass() {
    let p = Policy::from_json(with_checks("").as_bytes()).unwrap();
    assert_eq!(
        p.select(None, None, None).unwrap_err(),
        SelectError::NoAgent
    );
}

#[test]
fn host_ports_are_ignored() {
    assert_eq!(strip_port("a.example:443"), "a.example");
    assert_eq!(strip_port("a.example"), "a.example");
    assert_eq!(strip_port("[::1]:80"), "::1");
}

#[test]
fn stream_framing_can_be_turned_on_but_not_made_tiny() {
    let with = |n: usize| {
        format!(
            r#"{{"stream_frame_bytes": {n}, "agents": {{"a": {{"published": "1", "versions": {{"1": {{}}}}}}}}}}"#
        )
    };
    assert_eq!(
        Policy::from_json(with(0).as_bytes())
            .unwrap()
            .stream_frame_bytes,
        None
    );
    assert_eq!(
        Policy::from_json(with(MIN_STREAM_FRAME_BYTES).as_bytes())
            .unwrap()
            .stream_frame_bytes,
        Some(MIN_STREAM_FRAME_BYTES)
    );
    assert!(one_error(&with(100)).contains("field `stream_frame_bytes`"));
}

/// A config naming only the given top-level fields beside one empty agent.
fn with_top(fields: &str) -> String {
    format!(
        r#"{{{fields}, "agents": {{"a": {{"published": "1", "versions": {{"1": {{"live_checks": []}}}}}}}}}}"#
    )
}

#[test]
fn judge_cluster_takes_mesh_names_and_callouts_name_the_service() {
    let istio = "outbound|8181||livecheck-judge.livecheck.svc.cluster.local";
    let policy =
        Policy::from_json(with_top(&format!(r#""judge_cluster": "{istio}""#)).as_bytes()).unwrap();
    assert_eq!(policy.judge_cluster, istio);
    assert_eq!(
        policy.judge_authority,
        "livecheck-judge.livecheck.svc.cluster.local:8181"
    );
    // Envoy Gateway and hand-written names are used as they are, unless judge_authority says.
    let eg = r#""judge_cluster": "httproute/livecheck/livecheck-judge/rule/0", "judge_authority": "livecheck-judge.livecheck:8181""#;
    let policy = Policy::from_json(with_top(eg).as_bytes()).unwrap();
    assert_eq!(policy.judge_authority, "livecheck-judge.livecheck:8181");
    assert_eq!(authority_of_cluster("livecheck-judge"), "livecheck-judge");
    assert_eq!(authority_of_cluster("outbound|x||h"), "outbound|x||h");
    let bad = one_error(&with_top(r#""judge_cluster": "httproute/a/b/rule/0""#));
    assert!(bad.contains("judge_authority"), "{bad}");
    let bad = one_error(&with_top(r#""judge_cluster": "has space""#));
    assert!(bad.contains("judge_cluster"), "{bad}");
}

#[test]
fn the_judge_token_comes_from_the_config_or_the_vm_environment_and_is_never_shown() {
    let token = "t0k3n-abcdefghijklmnop";
    let policy =
        Policy::from_json(with_top(&format!(r#""judge_token": "{token}""#)).as_bytes()).unwrap();
    assert_eq!(policy.judge_token(), Some(token));
    assert!(!format!("{policy:?}").contains(token));

    let mut policy =
        Policy::from_json(with_top(r#""judge_token_env": "LC_TOKEN""#).as_bytes()).unwrap();
    assert_eq!(policy.judge_token(), None);
    let unset = policy.judge_token.clone();
    let err = policy.resolve_token(|_| None).unwrap_err().to_string();
    assert!(err.contains("LC_TOKEN is not set"), "{err}");
    let err = policy
        .resolve_token(|_| Some("short".into()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("LC_TOKEN is set, but") && !err.contains("short"),
        "{err}"
    );
    policy
        .resolve_token(|name| (name == "LC_TOKEN").then(|| token.to_owned()))
        .unwrap();
    assert_eq!(policy.judge_token(), Some(token));
    assert!(!format!("{policy:?}").contains(token));
    assert_eq!(unset, Some(TokenSource::Env("LC_TOKEN".into())));

    let both = one_error(&with_top(
        r#""judge_token": "t0k3n-abcdefghijklmnop", "judge_token_env": "X""#,
    ));
    assert!(both.contains("not both"), "{both}");
    let short = one_error(&with_top(r#""judge_token": "short""#));
    assert!(
        short.contains("judge_token") && !short.contains("short\""),
        "{short}"
    );
    let name = one_error(&with_top(r#""judge_token_env": "A-B""#));
    assert!(name.contains("judge_token_env"), "{name}");
}
