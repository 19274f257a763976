//! Every fuzz target's checked-in seeds (fuzz/corpus/<target>/) run once through the target's body,
//! on the stable toolchain and without libFuzzer (`cargo nextest run` in `make test`): a change
//! that breaks a target's property on a seed, or stops a target compiling, fails CI in seconds
//! rather than in the next nightly `make fuzz`.

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// A fuzz target's body: panics when an input breaks one of its properties.
type Check = fn(&[u8]);

/// Each fuzz target (fuzz_targets/<name>.rs) and the body it fuzzes.
const TARGETS: [(&str, Check); 7] = [
    (
        "eventstream_decoder",
        livecheck_fuzz_checks::eventstream_decoder::check,
    ),
    ("policy", livecheck_fuzz_checks::policy::check),
    ("request_text", livecheck_fuzz_checks::request_text::check),
    ("sidecar_wire", livecheck_fuzz_checks::sidecar_wire::check),
    ("sse_decoder", livecheck_fuzz_checks::sse_decoder::check),
    (
        "stream_rewriter",
        livecheck_fuzz_checks::stream_rewriter::check,
    ),
    ("tool_calls", livecheck_fuzz_checks::tool_calls::check),
];

/// fuzz/, the cargo-fuzz package: its fuzz_targets/ and corpus/.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The paths in `dir`, sorted.
fn paths_in(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    paths
}

/// The stems of the paths in `dir` (`policy` for `policy.rs`), sorted.
fn stems_in(dir: &Path) -> Vec<String> {
    let mut stems: Vec<String> = paths_in(dir)
        .iter()
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    stems
}

/// Runs `target`'s body on each of its seeds; fails naming every seed that panicked (each panic's
/// message is printed above the failure by the panic hook).
fn replay(target: &str) {
    let (_, check) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("{target} is not in TARGETS"));
    let corpus = fuzz_dir().join("corpus").join(target);
    let seeds = paths_in(&corpus);
    assert!(!seeds.is_empty(), "{} holds no seeds", corpus.display());
    let failed: Vec<&PathBuf> = seeds
        .iter()
        .filter(|seed| {
            let input = fs::read(seed).unwrap();
            catch_unwind(AssertUnwindSafe(|| check(&input))).is_err()
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} seeds of {target} break its properties: {failed:?}",
        failed.len(),
        seeds.len()
    );
}

#[test]
fn every_fuzz_target_is_replayed_and_has_seeds() {
    let targets = stems_in(&fuzz_dir().join("fuzz_targets"));
    let replayed: Vec<String> = TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(targets, replayed, "fuzz_targets/ and this file's TARGETS");
    assert_eq!(
        stems_in(&fuzz_dir().join("corpus")),
        replayed,
        "corpus/ and this file's TARGETS"
    );
}

#[test]
fn every_eventstream_decoder_seed_decodes_the_same_however_chunked() {
    replay("eventstream_decoder");
}

#[test]
fn every_policy_seed_keeps_the_policy_compilers_properties() {
    replay("policy");
}

#[test]
fn every_request_text_seed_reads_as_serde_json_reads_it() {
    replay("request_text");
}

#[test]
fn every_sidecar_wire_seed_round_trips_and_reads_verdicts_soundly() {
    replay("sidecar_wire");
}

#[test]
fn every_sse_decoder_seed_decodes_the_same_however_chunked() {
    replay("sse_decoder");
}

#[test]
fn every_stream_rewriter_seed_shows_the_caller_no_match() {
    replay("stream_rewriter");
}

#[test]
fn every_tool_calls_seed_reads_calls_as_serde_json_does() {
    replay("tool_calls");
}
