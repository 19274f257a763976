//! What the root context does, against [`FakeRoot`]: reports leave from the tick (batched into
//! one callout), a failed delivery is kept and sent again, the reports of a VM that stopped are
//! counted, and the timers streams ask for fire once, on time, and never for a stream that ended.

use livecheck_wire::{RESULTS_BATCH_PATH, RESULTS_PATH};

use super::timers::{CLOSE_GRACE_MS, HEADERS_GRACE_MS};
use super::*;
use crate::host::fake::{FakeHost, FakeRoot};
use crate::lost_reports::{REGISTRY_KEY, STALE_MS, SWEEP_EVERY_MS};
use crate::outbox::{CAPACITY, FIRST_BACKOFF_MS};

/// The fake stream host's clock.
const T0: u64 = 1_790_000_000_000;

const CONFIG: &str = r#"{"judge_cluster": "judge", "agents": {"a": {"published": "1", "versions": {"1": {"live_checks": []}}}}}"#;

fn configured() -> (Root, FakeRoot) {
    let mut root = Root::default();
    let mut host = FakeRoot::at(T0);
    assert!(root.configure(&mut host, CONFIG.as_bytes()));
    (root, host)
}

/// A report without background checks: it may go in a batch.
fn report(n: u8) -> Job {
    Job {
        headers: vec![],
        body: format!(r#"{{"n":{n}}}"#).into_bytes(),
        batchable: true,
    }
}

/// Streams of the VM hand these reports over as their turns end.
fn deliver(root: &Root, jobs: impl IntoIterator<Item = Job>) -> FakeHost {
    let mut stream = FakeHost::default();
    let vm = root.vm();
    for job in jobs {
        vm.deliver(&mut stream, job);
    }
    stream
}

fn path(callout: &crate::host::fake::SentCallout) -> Option<&str> {
    callout
        .1
        .iter()
        .find(|(k, _)| k == ":path")
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_report_batch_leaves_as_one_callout_on_the_tick() {
    let (mut root, mut host) = configured();
    deliver(&root, (0..3).map(report));
    assert!(host.callouts.is_empty(), "nothing leaves before the tick");
    root.tick(&mut host);
    assert_eq!(host.callouts.len(), 1);
    let (cluster, _, body, timeout) = &host.callouts[0];
    assert_eq!(cluster, "judge");
    assert_eq!(path(&host.callouts[0]), Some(RESULTS_BATCH_PATH));
    assert_eq!(body, br#"{"reports":[{"n":0},{"n":1},{"n":2}]}"#);
    assert_eq!(*timeout, REPORT_TIMEOUT_MS);
    assert_eq!(root.vm().pending_reports(), 3, "in flight until stored");
    host.callout_status = Some(200);
    root.report_answered(&mut host, 1);
    assert_eq!(root.vm().pending_reports(), 0);
    root.tick(&mut host);
    assert_eq!(host.callouts.len(), 1, "a stored batch is not sent again");
}

#[test]
fn a_report_with_headers_of_its_own_leaves_alone_with_them() {
    let (mut root, mut host) = configured();
    let own = Job {
        headers: vec![(":path".to_owned(), "/v1/results".to_owned())],
        body: b"{}".to_vec(),
        batchable: false,
    };
    deliver(&root, [own.clone()]);
    root.tick(&mut host);
    assert_eq!(host.callouts.len(), 1);
    assert_eq!(host.callouts[0].1, own.headers);
    assert_eq!(host.callouts[0].2, own.body);
}

#[test]
fn no_report_leaves_before_a_configuration_was_taken() {
    let mut root = Root::default();
    let mut host = FakeRoot::at(T0);
    deliver(&root, [report(0)]);
    root.tick(&mut host);
    assert!(host.callouts.is_empty());
    assert_eq!(root.vm().pending_reports(), 1);
}

#[test]
fn a_callout_envoy_refuses_is_kept_counted_and_sent_again_after_the_backoff() {
    let (mut root, mut host) = configured();
    deliver(&root, (0..3).map(report));
    host.refuse_callouts = true;
    root.tick(&mut host);
    assert_eq!(host.counter("livecheck.reports.retried"), 1);
    assert_eq!(root.vm().pending_reports(), 3);
    host.refuse_callouts = false;
    host.now = T0 + FIRST_BACKOFF_MS - 1;
    root.tick(&mut host);
    assert!(host.callouts.is_empty(), "backing off");
    host.now = T0 + FIRST_BACKOFF_MS;
    root.tick(&mut host);
    assert_eq!(host.callouts.len(), 1);
    assert_eq!(
        host.callouts[0].2,
        br#"{"reports":[{"n":0},{"n":1},{"n":2}]}"#
    );
}

#[test]
fn a_failed_delivery_is_kept_and_sent_again() {
    let (mut root, mut host) = configured();
    deliver(&root, (0..2).map(report));
    root.tick(&mut host);
    host.callout_status = Some(503);
    root.report_answered(&mut host, 1);
    assert_eq!(host.counter("livecheck.reports.retried"), 1);
    assert_eq!(root.vm().pending_reports(), 2);
    host.now = T0 + FIRST_BACKOFF_MS;
    root.tick(&mut host);
    assert_eq!(host.callouts.len(), 2);
    assert_eq!(
        host.callouts[1].2, host.callouts[0].2,
        "the same batch again"
    );
    host.callout_status = None;
    root.report_answered(&mut host, 2);
    assert_eq!(
        host.counter("livecheck.reports.retried"),
        2,
        "a reset is a failure too"
    );
    assert_eq!(root.vm().pending_reports(), 2);
}

#[test]
fn a_refused_report_is_dropped_counted_and_logged() {
    let (mut root, mut host) = configured();
    deliver(&root, [report(0)]);
    root.tick(&mut host);
    host.callout_status = Some(400);
    root.report_answered(&mut host, 1);
    assert_eq!(host.counter("livecheck.reports.refused"), 1);
    assert_eq!(root.vm().pending_reports(), 0);
    assert_eq!(
        host.logged(LogLevel::Error),
        ["livecheck: the sidecar refused a turn report; it is dropped"]
    );
}

#[test]
fn a_sidecar_without_batches_gets_the_reports_alone_from_then_on() {
    let (mut root, mut host) = configured();
    deliver(&root, (0..2).map(report));
    root.tick(&mut host);
    host.callout_status = Some(404);
    root.report_answered(&mut host, 1);
    assert_eq!(host.logged(LogLevel::Warn).len(), 1);
    assert_eq!(host.counter("livecheck.reports.refused"), 0);
    root.tick(&mut host);
    let again: Vec<_> = host.callouts.iter().skip(1).collect();
    assert_eq!(again.len(), 2, "each alone, without backoff");
    assert!(again.iter().all(|c| path(c) == Some(RESULTS_PATH)));
    assert_eq!(again[0].2, br#"{"n":0}"#);
}

#[test]
fn an_answer_to_a_callout_the_root_never_sent_changes_nothing() {
    let (mut root, mut host) = configured();
    deliver(&root, [report(0)]);
    root.tick(&mut host);
    host.callout_status = Some(400);
    root.report_answered(&mut host, 9);
    assert_eq!(root.vm().pending_reports(), 1);
    assert!(host.counters.is_empty() && host.logged(LogLevel::Error).is_empty());
}

#[test]
fn a_report_delivered_to_a_full_outbox_is_dropped_and_counted() {
    let (root, _) = configured();
    let stream = deliver(&root, (0..=CAPACITY).map(|i| report((i % 10) as u8)));
    assert_eq!(root.vm().pending_reports(), CAPACITY);
    assert_eq!(stream.counters.get("livecheck.reports.dropped"), Some(&1));
}

#[test]
fn a_delivered_report_is_counted_in_the_vms_shared_entry() {
    let (root, _) = configured();
    let stream = deliver(&root, [report(0)]);
    let key = crate::lost_reports::entry_key(1);
    let (entry, _) = stream.shared.entries.get(&key).expect("the VM's entry");
    assert_eq!(entry[..8], 1u64.to_le_bytes(), "one report pending");
}

#[test]
fn configuring_registers_the_vm_and_asks_for_the_tick() {
    let (root, host) = configured();
    assert!(root.policy().is_some());
    assert_eq!(host.tick_period_ms, Some(TICK_MS));
    assert!(host.shared.entries.contains_key(REGISTRY_KEY));
    assert_eq!(
        host.logged(LogLevel::Info),
        ["livecheck configured: 1 agent(s)"]
    );
}

#[test]
fn a_vm_without_a_timer_says_reports_cannot_be_sent() {
    let mut root = Root::default();
    let mut host = FakeRoot {
        refuse_tick: true,
        ..FakeRoot::at(T0)
    };
    assert!(root.configure(&mut host, CONFIG.as_bytes()));
    assert_eq!(
        host.logged(LogLevel::Warn),
        ["livecheck: no timer: turn reports cannot be sent"]
    );
}

#[test]
fn a_bad_configuration_is_refused_whole_with_one_line_per_problem() {
    let mut root = Root::default();
    let mut host = FakeRoot::at(T0);
    let bad = r#"{"judge_cluster": "a b", "agents": {"a": {"published": "2", "versions": {"1": {"live_checks": []}}}}}"#;
    assert!(!root.configure(&mut host, bad.as_bytes()));
    assert!(root.policy().is_none());
    let errors = host.logged(LogLevel::Error);
    let problems = errors.len() - 1;
    assert!(problems >= 1);
    assert_eq!(
        errors.last().copied(),
        Some(format!("config refused: {problems} problem(s)").as_str())
    );
    assert_eq!(host.tick_period_ms, None);
    assert!(host.shared.entries.is_empty(), "the VM is not registered");
}

/// A VM that dies with two reports undelivered, and another that lives on: they share Envoy's
/// shared data (handed from one fake host to the other).
#[test]
fn the_reports_of_a_vm_that_stopped_are_counted_lost_once_by_one_that_lives() {
    let (mut dead, mut dead_host) = configured();
    deliver(&dead, (0..2).map(report));
    dead_host.refuse_callouts = true;
    dead.tick(&mut dead_host);

    let mut live = Root::default();
    let mut host = FakeRoot {
        seed: 1,
        shared: std::mem::take(&mut dead_host.shared),
        ..FakeRoot::at(T0)
    };
    assert!(live.configure(&mut host, CONFIG.as_bytes()));
    host.now = T0 + STALE_MS;
    live.tick(&mut host);
    assert_eq!(host.counter("livecheck.reports.lost"), 0, "not stale yet");

    host.now = T0 + STALE_MS + SWEEP_EVERY_MS - 1;
    live.tick(&mut host);
    assert_eq!(
        host.counter("livecheck.reports.lost"),
        0,
        "no sweep between sweeps"
    );

    host.now = T0 + STALE_MS + SWEEP_EVERY_MS;
    live.tick(&mut host);
    assert_eq!(host.counter("livecheck.reports.lost"), 2);
    assert_eq!(
        host.logged(LogLevel::Error),
        ["livecheck: 2 turn report(s) of a VM that stopped (a trap or a replaced configuration) were never delivered; counted in livecheck.reports.lost"]
    );

    host.now += 2 * SWEEP_EVERY_MS;
    live.tick(&mut host);
    assert_eq!(host.counter("livecheck.reports.lost"), 2, "counted once");
}

#[test]
fn a_cut_stream_is_reset_once_by_the_first_tick_after_its_grace() {
    let (mut root, mut host) = configured();
    root.vm().close_soon(7, T0);
    root.vm().close_soon(7, T0 + 1_000);
    host.now = T0 + CLOSE_GRACE_MS - 1;
    root.tick(&mut host);
    assert!(host.closed.is_empty());
    host.now = T0 + CLOSE_GRACE_MS;
    root.tick(&mut host);
    assert_eq!(host.closed, [7], "listed once, at its first time");
    host.now += 1_000;
    root.tick(&mut host);
    assert_eq!(host.closed, [7]);
}

#[test]
fn no_timer_acts_on_a_stream_that_ended() {
    let (mut root, mut host) = configured();
    let vm = root.vm();
    vm.close_soon(7, T0);
    vm.release_soon(7, T0);
    vm.forget(7);
    host.now = T0 + 10 * HEADERS_GRACE_MS;
    root.tick(&mut host);
    assert!(host.closed.is_empty() && host.resumed.is_empty());
}

#[test]
fn held_headers_go_on_after_their_grace_and_the_vm_warns_once() {
    let (mut root, mut host) = configured();
    let vm = root.vm();
    vm.release_soon(3, T0);
    vm.release_soon(4, T0);
    host.now = T0 + HEADERS_GRACE_MS - 1;
    root.tick(&mut host);
    assert!(host.resumed.is_empty());
    host.now = T0 + HEADERS_GRACE_MS;
    root.tick(&mut host);
    assert_eq!(host.resumed, [3, 4]);
    assert!(vm.headers_released(3), "the body callback learns it");
    assert!(!vm.headers_released(3), "once");
    vm.release_soon(5, host.now);
    host.now += HEADERS_GRACE_MS;
    root.tick(&mut host);
    assert_eq!(host.resumed, [3, 4, 5]);
    assert_eq!(host.logged(LogLevel::Warn).len(), 1, "the VM says so once");
}

#[test]
fn a_body_within_the_grace_keeps_the_headers_with_the_filter() {
    let (mut root, mut host) = configured();
    let vm = root.vm();
    vm.release_soon(3, T0);
    assert!(!vm.headers_released(3));
    host.now = T0 + HEADERS_GRACE_MS;
    root.tick(&mut host);
    assert!(host.resumed.is_empty());
    assert!(host.logged(LogLevel::Warn).is_empty());
}
