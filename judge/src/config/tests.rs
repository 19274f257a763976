//! The config's tests: each part's rules and defaults through `Settings::from_toml` / `from_json` /
//! `load`, as an operator meets them; in a file of their own, beside the rooms they test.

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

const TWO: &str = r#"
    [[backends]]
    name = "claude"
    api = "anthropic"
    base_url = "https://api.anthropic.com/"
    models = ["claude-*", "claude-special-*"]

    [[backends]]
    name = "local"
    api = "openai"
    base_url = "http://127.0.0.1:8080/proxy"
    models = ["*", "claude-sonnet-exact"]
"#;

#[test]
fn defaults_are_loopback_and_bounded() {
    let s = Settings::from_toml(TWO, &no_env).unwrap();
    assert_eq!(s.listen, "127.0.0.1:8181".parse().unwrap());
    assert_eq!(s.timeout, Duration::from_millis(8_000));
    assert_eq!(s.max_concurrent, 32);
    assert_eq!(s.limits, Limits::default());
    assert_eq!(s.limits.max_request_bytes, 8 << 20);
    assert_eq!(s.limits.max_backend_answer_bytes, 1 << 20);
}

#[test]
fn limits_are_read_and_checked() {
    let set = format!(
        "[limits]\nmax_request_bytes = 4096\nmax_backend_answer_bytes = 2048\n\
         max_retry_answer_bytes = 8192\nmax_pending_checks = 3\nmax_queued_events = 5\n{TWO}"
    );
    let s = Settings::from_toml(&set, &no_env).unwrap();
    let want = Limits {
        max_request_bytes: 4096,
        max_backend_answer_bytes: 2048,
        max_retry_answer_bytes: 8192,
        max_pending_checks: 3,
        max_queued_events: 5,
    };
    assert_eq!(s.limits, want);
    let bad = format!(
        "[limits]\nmax_request_bytes = 10\nmax_pending_checks = 0\nmax_queued_events = 0\n{TWO}"
    );
    let all = Settings::from_toml(&bad, &no_env).unwrap_err().to_string();
    for needle in [
        "limits: max_request_bytes must be at least 1024 bytes, not 10",
        "limits: max_pending_checks must be at least 1",
        "limits: max_queued_events must be at least 1",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    let unknown = format!("[limits]\nmax_bytes = 10\n{TWO}");
    assert!(Settings::from_toml(&unknown, &no_env).is_err());
}

#[test]
fn exact_name_wins_then_longest_prefix() {
    let s = Settings::from_toml(TWO, &no_env).unwrap();
    let name = |m: &str| s.models.backend_for(m).map(|b| b.name.clone());
    assert_eq!(name("claude-sonnet-exact").as_deref(), Some("local"));
    assert_eq!(name("claude-haiku").as_deref(), Some("claude"));
    assert_eq!(name("gpt-4.1-mini").as_deref(), Some("local"));
    let claude = s.models.backend_for("claude-x").unwrap();
    assert_eq!(
        claude.endpoint.as_str(),
        "https://api.anthropic.com/v1/messages"
    );
    let local = s.models.backend_for("x").unwrap();
    assert_eq!(
        local.endpoint.as_str(),
        "http://127.0.0.1:8080/proxy/v1/chat/completions"
    );
}

#[test]
fn env_overrides_the_file() {
    let env = |var: &str| match var {
        LISTEN_ENV => Some("0.0.0.0:9000".to_owned()),
        TIMEOUT_ENV => Some("1500".to_owned()),
        MAX_CONCURRENT_ENV => Some("4".to_owned()),
        "FILTER_TOKEN" => Some(FILTER_TOKEN.to_owned()),
        _ => None,
    };
    let s = Settings::from_toml(&format!("{TWO}{WITH_FILTER_TOKEN}"), &env).unwrap();
    assert_eq!(s.listen, "0.0.0.0:9000".parse().unwrap());
    assert_eq!(s.timeout, Duration::from_millis(1500));
    assert_eq!(s.max_concurrent, 4);
}

const FILTER_TOKEN: &str = "filter-token-3c9e1d77";
const WITH_FILTER_TOKEN: &str = "\n[filter]\ntoken_env = \"FILTER_TOKEN\"\n";

fn filter_token_env(value: &str) -> impl Fn(&str) -> Option<String> + '_ {
    move |var: &str| (var == "FILTER_TOKEN").then(|| value.to_owned())
}

#[test]
fn the_filter_token_is_read_from_its_env_var_and_never_printed() {
    let config = format!("{TWO}{WITH_FILTER_TOKEN}");
    let s = Settings::from_toml(&config, &filter_token_env(FILTER_TOKEN)).unwrap();
    assert_eq!(s.filter_token.as_ref().unwrap().expose(), FILTER_TOKEN);
    assert!(!format!("{s:?}").contains("3c9e1d77"), "{s:?}");
    let s = Settings::from_toml(TWO, &no_env).unwrap();
    assert!(s.filter_token.is_none());
}

#[test]
fn a_filter_token_env_unset_or_not_holding_a_token_is_refused_without_its_value() {
    let config = format!("{TWO}{WITH_FILTER_TOKEN}");
    let err = Settings::from_toml(&config, &no_env).unwrap_err();
    assert_eq!(
        err.0,
        vec!["filter: token_env names FILTER_TOKEN, which is not set"]
    );
    let (too_long, longest) = ("x".repeat(257), "y".repeat(256));
    for bad in [
        "short-9q7",
        "fifteen-chars-9",
        &too_long,
        "has a space 9q7-9q7",
        "non-ascii-9q7-9q7-é",
    ] {
        let err = Settings::from_toml(&config, &filter_token_env(bad)).unwrap_err();
        assert_eq!(
            err.0,
            vec!["filter: token_env names FILTER_TOKEN, which does not hold 16 to 256 visible ASCII characters"],
            "{bad:?}"
        );
    }
    for good in ["sixteen-chars-9q", &longest] {
        let s = Settings::from_toml(&config, &filter_token_env(good)).unwrap();
        assert_eq!(s.filter_token.unwrap().expose(), good);
    }
}

#[test]
fn listening_beyond_loopback_needs_a_filter_token() {
    for listen in ["0.0.0.0:8181", "10.1.2.3:8181", "[::]:8181"] {
        let config = format!("listen = \"{listen}\"\n{TWO}");
        let err = Settings::from_toml(&config, &no_env).unwrap_err();
        assert_eq!(err.0.len(), 1, "{err}");
        assert!(
            err.0[0].starts_with(&format!("listen: {listen} is beyond loopback"))
                && err.0[0].contains("set [filter] token_env"),
            "{err}"
        );
        let config = format!("{config}{WITH_FILTER_TOKEN}");
        let s = Settings::from_toml(&config, &filter_token_env(FILTER_TOKEN)).unwrap();
        assert_eq!(s.listen, listen.parse().unwrap());
    }
    // The env override is named as the setting that put the sidecar there.
    let env = |var: &str| (var == LISTEN_ENV).then(|| "0.0.0.0:9000".to_owned());
    let err = Settings::from_toml(TWO, &env).unwrap_err();
    assert!(
        err.0[0].starts_with("LIVECHECK_JUDGE_LISTEN: 0.0.0.0:9000 is beyond loopback"),
        "{err}"
    );
    // Loopback without a token stays as it was.
    for listen in ["127.0.0.1:8181", "127.0.0.2:1", "[::1]:8181"] {
        let config = format!("listen = \"{listen}\"\n{TWO}");
        assert!(Settings::from_toml(&config, &no_env).is_ok(), "{listen}");
    }
}

#[test]
fn the_filter_token_and_the_operator_token_must_differ() {
    let config = format!("{TWO}{WITH_FILTER_TOKEN}[api]\ntoken_env = \"API_TOKEN\"\n");
    let env = |var: &str| match var {
        "FILTER_TOKEN" | "API_TOKEN" => Some(FILTER_TOKEN.to_owned()),
        _ => None,
    };
    let err = Settings::from_toml(&config, &env).unwrap_err();
    assert_eq!(
        err.0,
        vec!["filter: token_env holds the operator token (api: token_env); each needs its own"]
    );
    let env = |var: &str| match var {
        "FILTER_TOKEN" => Some(FILTER_TOKEN.to_owned()),
        "API_TOKEN" => Some("operator-token-51ab".to_owned()),
        _ => None,
    };
    let s = Settings::from_toml(&config, &env).unwrap();
    assert!(s.filter_token.is_some() && s.api_token.is_some());
}

#[test]
fn json_config_reads_the_same() {
    let json = r#"{"listen":"127.0.0.1:1","backends":[{"api":"openai","base_url":"http://h","models":["m"]}]}"#;
    let s = Settings::from_json(json, &no_env).unwrap();
    assert_eq!(s.models.backend_for("m").unwrap().name, "backends[0]");
    assert!(s.models.backend_for("m2").is_none());
}

#[test]
fn every_problem_is_listed_with_where_it_is() {
    let bad = r#"
        listen = "localhost"
        timeout_ms = 0
        max_concurrent = 0
        [[backends]]
        name = "a"
        api = "openai"
        base_url = "http://h/v1"
        api_key_env = "LIVECHECK_TEST_UNSET_KEY"
        models = ["m"]
        [[backends]]
        name = "b"
        api = "anthropic"
        base_url = "ftp://h"
        models = []
        [[backends]]
        name = "c"
        api = "openai"
        base_url = "http://h"
        models = ["m"]
    "#;
    let err = Settings::from_toml(bad, &no_env).unwrap_err();
    let all = err.to_string();
    for needle in [
        "listen: \"localhost\" is not an address",
        "timeout_ms: must be between 1",
        "max_concurrent: must be at least 1",
        "backend \"a\": base_url \"http://h/v1\" must not end in /v1",
        "backend \"a\": api_key_env names LIVECHECK_TEST_UNSET_KEY, which is not set",
        "backend \"b\": base_url \"ftp://h\" must be http or https",
        "backend \"b\": models is empty",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(err.0.len(), 7, "{all}");
}

#[test]
fn a_model_served_twice_is_refused() {
    let bad = r#"
        [[backends]]
        name = "a"
        api = "openai"
        base_url = "http://h"
        models = ["m", "p-*"]
        [[backends]]
        name = "b"
        api = "openai"
        base_url = "http://h"
        models = ["m", "p-*"]
    "#;
    let err = Settings::from_toml(bad, &no_env).unwrap_err();
    assert_eq!(
        err.0,
        vec![
            "backend \"b\": model \"m\" is already served by backend \"a\"",
            "backend \"b\": model \"p-*\" is already served by backend \"a\"",
        ]
    );
}

#[test]
fn unknown_fields_and_apis_are_refused() {
    let err = Settings::from_toml("listn = \"127.0.0.1:1\"", &no_env).unwrap_err();
    assert!(err.to_string().contains("unknown field `listn`"), "{err}");
    let err = Settings::from_toml(
        "[[backends]]\napi = \"gemini\"\nbase_url = \"http://h\"\nmodels = [\"m\"]",
        &no_env,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown variant `gemini`"),
        "{err}"
    );
}

#[test]
fn no_backends_is_an_error() {
    let err = Settings::from_toml("", &no_env).unwrap_err();
    assert!(err.to_string().contains("backends: none configured"));
}

#[test]
fn the_results_settings_are_read_from_env_vars_by_name() {
    const ALL: &str = r#"
        [[backends]]
        api = "openai"
        base_url = "http://h"
        models = ["*"]
        [store]
        url_env = "DB_URL"
        retention_days = 7
        [api]
        token_env = "API_TOKEN"
        [alerts]
        slack_webhook_url_env = "SLACK_URL"
        [alerts.smtp]
        host = "127.0.0.1"
        tls = "none"
        from = "lc@example.com"
        to = ["ops@example.com"]
        [[webhooks]]
        url = "https://hooks.example.com/lc"
        secret_env = "HOOK_SECRET"
    "#;
    let env = |var: &str| {
        match var {
            "DB_URL" => Some("postgres://u:pw-9z@db/lc"),
            "API_TOKEN" => Some("tok-9z"),
            "SLACK_URL" => Some("https://hooks.slack.com/services/T/B/x9z"),
            "HOOK_SECRET" => Some("whsec-9z"),
            _ => None,
        }
        .map(str::to_owned)
    };
    let s = Settings::from_toml(ALL, &env).unwrap();
    assert_eq!(s.store.url.expose(), "postgres://u:pw-9z@db/lc");
    assert_eq!(s.store.retention, Duration::from_secs(7 * 86_400));
    assert_eq!(s.api_token.as_ref().unwrap().expose(), "tok-9z");
    let smtp = s.alerts.smtp.as_ref().unwrap();
    assert_eq!((smtp.port, smtp.tls), (25, SmtpTls::None));
    assert_eq!(s.webhooks.len(), 1);
    assert!(
        !format!("{s:?}").contains("9z"),
        "no secret in a debug dump"
    );
}

#[test]
fn the_default_store_is_a_sqlite_file_beside_the_config() {
    let dir = std::env::temp_dir().join(format!("lc-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("judge.toml");
    std::fs::write(&path, TWO).unwrap();
    let s = Settings::load(&path, &no_env).unwrap();
    assert_eq!(
        s.store.url.expose(),
        format!("sqlite://{}", dir.join(DEFAULT_SQLITE_FILE).display())
    );
    assert_eq!(s.store.retention, Duration::from_secs(30 * 86_400));
    assert!(s.api_token.is_none() && s.webhooks.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_results_problem_is_listed() {
    let bad = format!(
        "{TWO}\n{}",
        r#"
        [store]
        url = "postgres://u:secret@db/lc"
        retention_days = 0
        [api]
        token_env = "NO_TOKEN"
        [alerts.smtp]
        host = "smtp.example.com"
        tls = "none"
        from = "nobody"
        to = []
        [[webhooks]]
        url = "ftp://h"
        secret_env = "NO_SECRET"
        "#
    );
    let err = Settings::from_toml(&bad, &no_env).unwrap_err();
    let all = err.to_string();
    for needle in [
        "store: retention_days must be between 1",
        "store: url carries a password",
        "api: token_env names NO_TOKEN, which is not set",
        "alerts.smtp: tls = \"none\" is only allowed for a relay on loopback",
        "alerts.smtp: from is not a mail address",
        "alerts.smtp: to lists no address",
        "webhooks[0]: url \"ftp://h\" is not an http(s) URL",
        "webhooks[0]: secret_env names NO_SECRET, which is not set",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert!(!all.contains("secret@"), "{all}");
}

#[test]
fn the_fallback_key_is_read_and_never_printed() {
    let env = |var: &str| (var == "JUDGE_KEY").then(|| "sk-secret-123".to_owned());
    let s = Settings::from_toml(
        "[[backends]]\napi = \"openai\"\nbase_url = \"http://h\"\napi_key_env = \"JUDGE_KEY\"\nmodels = [\"*\"]",
        &env,
    )
    .unwrap();
    let b = s.models.backend_for("x").unwrap();
    assert_eq!(b.fallback_key.as_deref(), Some("sk-secret-123"));
    assert!(!format!("{s:?}").contains("sk-secret-123"));
}
