//! The real filter, built for wasm32-wasip1, and the fresh-`.wasm` guard.

// Test helpers outside #[test] functions may unwrap too (clippy.toml covers only the tests).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use livecheck_harness::{
    fresh_wasm, fresh_wasm_in, read_fresh_wasm, HarnessError, Host, LogLevel, Options,
};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn livecheck_with(plugin_config: &[u8]) -> Result<Host, HarnessError> {
    let wasm = read_fresh_wasm(&workspace(), "livecheck").unwrap_or_else(|e| panic!("{e}"));
    Host::new(
        &wasm,
        Options {
            plugin_config: plugin_config.to_vec(),
            ..Options::default()
        },
    )
}

fn livecheck() -> Host {
    let seed = fs::read(workspace().join("examples/seed.json")).unwrap();
    livecheck_with(&seed).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn livecheck_logs_its_banner_on_vm_start() {
    let host = livecheck();
    let banner = host
        .logs()
        .iter()
        .find(|l| l.message.starts_with("livecheck "))
        .expect("banner logged");
    assert_eq!(banner.level, LogLevel::Info);
    assert!(banner.message.contains("(git "), "{}", banner.message);
}

#[test]
fn livecheck_refuses_an_empty_configuration() {
    // No policy means nothing to hold turns to: Envoy must reject the config, not run unchecked.
    let err = livecheck_with(b"")
        .err()
        .expect("an empty config is refused");
    assert!(matches!(err, HarnessError::ConfigRejected), "{err}");
}

#[test]
fn livecheck_lets_calls_it_does_not_check_through() {
    let mut host = livecheck();
    let s = host.new_stream();
    host.send_request_headers(
        s,
        &[
            (":method", "GET"),
            (":path", "/v1/models"),
            (":authority", "api"),
        ],
        true,
    )
    .unwrap();
    assert_eq!(
        host.upstream_received(s).header(":path"),
        Some("/v1/models")
    );
    host.send_response_headers(s, &[(":status", "200")], false)
        .unwrap();
    host.send_response_body(s, b"{\"data\": []}", true).unwrap();
    assert_eq!(host.caller_received(s).body, b"{\"data\": []}");
    assert!(!host.vm_failed());
}

/// A package directory with a `src/lib.rs`, a lock file and (maybe) a built wasm.
fn temp_package(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("livecheck-harness-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::create_dir_all(dir.join("target/wasm32-wasip1/release")).unwrap();
    fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"demo-filter\"\n",
    )
    .unwrap();
    fs::write(dir.join("Cargo.lock"), "").unwrap();
    fs::write(dir.join("src/lib.rs"), "").unwrap();
    dir
}

fn set_mtime(path: &Path, at: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(at)
        .unwrap();
}

/// The release directory of a [`temp_package`], where `make wasm` would put its `.wasm`.
fn release_dir(package: &Path) -> PathBuf {
    package.join("target/wasm32-wasip1/release")
}

// These call `fresh_wasm_in` with the directory spelled out, so they run whatever
// `LIVECHECK_WASM_DIR` says (the Makefile sets it for every step).
#[test]
fn fresh_wasm_fails_loudly_when_the_wasm_is_missing() {
    let dir = temp_package("missing");
    let err = fresh_wasm_in(&release_dir(&dir), &dir, "demo_filter").unwrap_err();
    let HarnessError::StaleWasm(message) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains("demo_filter.wasm is missing"), "{message}");
    assert!(message.contains("-p demo-filter"), "{message}");
    let _ = fs::remove_dir_all(&dir);
}

/// A wasm an hour old, with its package's files a minute older still.
fn built_an_hour_ago(dir: &Path) -> PathBuf {
    let wasm = release_dir(dir).join("demo_filter.wasm");
    fs::write(&wasm, b"\0asm").unwrap();
    let old = SystemTime::now() - Duration::from_secs(3600);
    for f in ["Cargo.toml", "Cargo.lock", "src/lib.rs", "src/other.rs"] {
        if dir.join(f).is_file() {
            set_mtime(&dir.join(f), old - Duration::from_secs(60));
        }
    }
    set_mtime(&wasm, old);
    wasm
}

fn stale_message(result: Result<PathBuf, HarnessError>) -> String {
    match result {
        Err(HarnessError::StaleWasm(message)) => message,
        other => panic!("a stale wasm was accepted: {other:?}"),
    }
}

#[test]
fn fresh_wasm_refuses_a_wasm_older_than_its_sources() {
    let dir = temp_package("stale");
    let wasm = built_an_hour_ago(&dir);
    assert_eq!(
        fresh_wasm_in(&release_dir(&dir), &dir, "demo_filter").unwrap(),
        wasm
    );
    set_mtime(&dir.join("src/lib.rs"), SystemTime::now());
    let message = stale_message(fresh_wasm_in(&release_dir(&dir), &dir, "demo_filter"));
    assert!(
        message.contains("is older than") && message.contains("lib.rs"),
        "{message}"
    );
    assert!(message.contains("make wasm"), "{message}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn fresh_wasm_refuses_a_wasm_older_than_the_lock_file() {
    let dir = temp_package("stale-lock");
    built_an_hour_ago(&dir);
    set_mtime(&dir.join("Cargo.lock"), SystemTime::now());
    let message = stale_message(fresh_wasm_in(&release_dir(&dir), &dir, "demo_filter"));
    assert!(message.contains("Cargo.lock"), "{message}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn fresh_wasm_reads_the_sources_from_cargos_dep_info() {
    // cargo writes `<name>.d` beside the artifact; a source it lists outside `src/` counts, and a
    // file under `src/` it does not list (a test-only module) does not.
    let dir = temp_package("dep-info");
    fs::write(dir.join("src/other.rs"), "").unwrap();
    let shared = dir.join("shared.rs");
    fs::write(&shared, "").unwrap();
    let wasm = built_an_hour_ago(&dir);
    set_mtime(&shared, SystemTime::now() - Duration::from_secs(7200));
    fs::write(
        release_dir(&dir).join("demo_filter.d"),
        format!(
            "{}: {} {}\n",
            wasm.display(),
            dir.join("src/lib.rs").display(),
            shared.display()
        ),
    )
    .unwrap();
    set_mtime(&dir.join("src/other.rs"), SystemTime::now());
    assert_eq!(
        fresh_wasm_in(&release_dir(&dir), &dir, "demo_filter").unwrap(),
        wasm,
        "a file the dep-info does not list made the wasm stale"
    );
    set_mtime(&shared, SystemTime::now());
    let message = stale_message(fresh_wasm_in(&release_dir(&dir), &dir, "demo_filter"));
    assert!(message.contains("shared.rs"), "{message}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn fresh_wasm_looks_where_the_environment_says_else_in_the_workspace_release_dir() {
    // Whatever this run's environment says, fresh_wasm finds the wasm in the directory it names;
    // the rule for an unset variable is pinned in wasm_file's unit tests.
    let dir = temp_package("env");
    let err = stale_message(fresh_wasm(&dir, "demo_filter"));
    let expected = match std::env::var_os(livecheck_harness::WASM_DIR_ENV) {
        Some(from_env) => PathBuf::from(from_env).join("demo_filter.wasm"),
        None => release_dir(&dir).join("demo_filter.wasm"),
    };
    assert!(
        err.starts_with(&format!("{} is missing", expected.display())),
        "{err}"
    );
    let _ = fs::remove_dir_all(&dir);
}
