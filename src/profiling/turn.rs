//! The turn logic's own cost in V8, function by function (issue 16): `make bench-v8-turn` runs
//! these ignored tests under Node with `--cpu-prof` and `benches/v8_turn_profile.py` sums the
//! samples per function; `make bench-sites` runs `chat_4k_turns` under callgrind
//! (`benches/turn_sites.py`). They drive the real `Turn` through its public callbacks against the
//! test host, as Envoy would.

use std::rc::Rc;

use crate::config::Policy;
use crate::host::fake::FakeHost;
use crate::host::Flow;
use crate::turn::Turn;

const RULES: &str = include_str!("../../benches/rules.json");

/// The bench's Chat request of `size` bytes (`benches/compare.py`'s `chat_body(size)`):
/// ordinary text.
fn request_of(size: usize) -> Vec<u8> {
    let sentence = "where is my order and when will it arrive at the depot near the station ? ";
    let wrap = |text: &str| {
        serde_json::json!({"model": "gpt-4.1-mini", "messages": [
            {"role": "system", "content": "You are a helpful shop assistant."},
            {"role": "user", "content": text}]})
        .to_string()
    };
    let room = size - wrap("").len();
    let text: String = sentence.chars().cycle().take(room).collect();
    wrap(&text).into_bytes()
}

/// The bench upstream double's clean answer (`benches/upstream-double`).
fn answer() -> Vec<u8> {
    let text = "Your order left our depot near the station this morning and should arrive \
        within three to five days. The invoice lists two items, a lamp and a chair, both in stock. \
        Please keep the receipt for returns, and ask again if anything is unclear.";
    format!(
        "{{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,\
         \"model\":\"gpt-4.1-mini\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\
         \"content\":\"{text}\"}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":900,\
         \"completion_tokens\":60,\"total_tokens\":960}}}}"
    )
    .into_bytes()
}

/// `LIVECHECK_PROFILE_TURNS`: how many turns a workload runs (default 20,000).
fn turns_asked() -> usize {
    std::env::var("LIVECHECK_PROFILE_TURNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

/// A test host whose caller posts `request` to Chat Completions, with `more` headers.
fn chat_host(request: &[u8], more: &[(&str, &str)]) -> FakeHost {
    let length = request.len().to_string();
    let mut headers = vec![
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "api.test"),
        ("content-type", "application/json"),
        ("content-length", length.as_str()),
    ];
    headers.extend_from_slice(more);
    FakeHost::with_request(&headers)
}

/// The upstream's non-streamed JSON answer: its headers and body, as the host will give them.
fn upstream_answers(host: &mut FakeHost, answer: &[u8]) {
    let length = answer.len().to_string();
    host.response_headers = [
        (":status", "200"),
        ("content-type", "application/json"),
        ("content-length", length.as_str()),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    host.response_body = answer.to_vec();
}

/// One checked 4 KiB Chat turn as Envoy drives it (body callbacks as the profile counts them).
/// `between` runs between two callbacks (Envoy's own work, which evicts caches, in a real turn).
#[inline(never)]
fn one_turn(
    policy: &Rc<Policy>,
    host: &mut FakeHost,
    request: &[u8],
    answer: &[u8],
    between: &mut dyn FnMut(),
) {
    let mut turn = Turn::new(Rc::clone(policy));
    host.request_body = request.to_vec();
    assert_eq!(turn.on_request_headers(host, false), Flow::Continue);
    between();
    assert_eq!(turn.on_request_body(host, 1024, false), Flow::Pause);
    between();
    assert_eq!(
        turn.on_request_body(host, request.len(), true),
        Flow::Continue
    );
    between();
    upstream_answers(host, answer);
    assert_eq!(turn.on_response_headers(host, false), Flow::Continue);
    between();
    assert_eq!(
        turn.on_response_body(host, answer.len(), true),
        Flow::Continue
    );
    between();
    turn.on_done(host);
    between();
    assert_eq!(host.delivered.len(), 1);
    host.delivered.clear();
    host.request_headers.remove("accept-encoding");
}

/// The tool-check bench's turn (`benches/tool_checks.py`): its request with one tool, the
/// upstream double's answer calling it, and the policy of its variant
/// `LIVECHECK_PROFILE_TOOLS` (`a`: no checks, `h`: one output rule, `b`: `allowed_tools` and
/// one `args` row); `LIVECHECK_PROFILE_TURNS` turns (default 20,000). Ignored in `make test`.
#[test]
#[ignore = "a profiling workload: make bench-v8-turn"]
fn tool_call_turns() {
    let variant = std::env::var("LIVECHECK_PROFILE_TOOLS").unwrap_or_default();
    let version = match variant.as_str() {
        "a" => "",
        "h" => {
            r#""live_checks": [{"name": "no-codename", "stage": "output", "kind": "not_contains", "expected": "project-bluebird"}],"#
        }
        _ => {
            r#""allowed_tools": ["send_email", "lookup_*"], "tool_checks": [{"name": "no-rival", "args": [{"pointer": "/to", "not_contains": "@rival.example"}]}],"#
        }
    };
    let policy = format!(
        r#"{{"default_agent": "bench", "agents": {{"bench": {{"published": "1", "versions": {{"1": {{
          {version} "model": "gpt-4.1-mini"}}}}}}}}}}"#
    );
    let policy = Rc::new(Policy::from_json(policy.as_bytes()).unwrap());
    let turns = turns_asked();
    let request = serde_json::json!({"model": "gpt-4.1-mini", "messages": [
        {"role": "system", "content": "You are an office assistant. Use the tools you are given."},
        {"role": "user", "content": "Please send this week's numbers to the ops team."}],
        "tools": [{"type": "function", "function": {"name": "send_email", "description": "Send an e-mail.",
          "parameters": {"type": "object", "required": ["to", "subject", "body"],
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"},
              "body": {"type": "string"}, "ref": {"type": "string"}}}}}]})
    .to_string()
    .into_bytes();
    let answer = br#"{"id":"chatcmpl-bench-tool","object":"chat.completion","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_bench_1","type":"function","function":{"name":"send_email","arguments":"{\"to\":\"ops@example.com\",\"subject\":\"Weekly numbers\",\"body\":\"The weekly numbers are in the shared folder.\",\"ref\":\"ref-1\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":900,"completion_tokens":40,"total_tokens":940}}"#;
    let mut host = chat_host(&request, &[("authorization", "Bearer sk-bench-turn-key")]);
    let began = std::time::Instant::now();
    for _ in 0..turns {
        let mut turn = Turn::new(Rc::clone(&policy));
        host.request_body = request.clone();
        turn.on_request_headers(&mut host, false);
        turn.on_request_body(&mut host, request.len(), true);
        upstream_answers(&mut host, answer);
        turn.on_response_headers(&mut host, false);
        assert_eq!(
            turn.on_response_body(&mut host, answer.len(), true),
            Flow::Continue
        );
        turn.on_done(&mut host);
        host.delivered.clear();
        host.request_headers.remove("accept-encoding");
    }
    eprintln!(
        "profiling tool_call_turns: {:.2} µs per turn",
        began.elapsed().as_secs_f64() * 1e6 / turns as f64
    );
    assert!(host.local_reply.is_none());
    assert!(host
        .response_body
        .starts_with(br#"{"id":"chatcmpl-bench-tool""#));
    // Each variant's checks ran once a turn, and passed.
    let counted = |check: &str| {
        host.counters
            .get(&format!("livecheck.bench.{check}.passed"))
            .copied()
    };
    match variant.as_str() {
        "a" => assert!(host.counters.keys().all(|k| !k.ends_with(".passed"))),
        "h" => assert_eq!(counted("no-codename"), Some(turns as u64)),
        _ => {
            assert_eq!(counted("no-rival"), Some(turns as u64));
            assert_eq!(counted("allowed_tools"), Some(turns as u64));
        }
    }
}

/// `LIVECHECK_PROFILE_TURNS` turns (default 20,000); ignored in `make test`.
#[test]
#[ignore = "a profiling workload: make bench-v8-turn"]
fn chat_4k_turns() {
    let policy = Rc::new(Policy::from_json(RULES.as_bytes()).unwrap());
    let turns = turns_asked();
    // LIVECHECK_PROFILE_BODY_KIB: the request's size (default 4 KiB, the bench's turn).
    let kib: usize = std::env::var("LIVECHECK_PROFILE_BODY_KIB")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    let (request, answer) = (request_of(kib * 1024), answer());
    let mut host = chat_host(&request, &[]);
    // LIVECHECK_PROFILE_EVICT_KIB: between callbacks, write one byte of every 64 of a buffer
    // that large (data caches evicted, roughly as Envoy's work between callbacks evicts them);
    // the time per turn printed is less the same writes timed alone.
    let evict_kib: usize = std::env::var("LIVECHECK_PROFILE_EVICT_KIB")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let mut junk = vec![0u8; evict_kib * 1024];
    let mut evicting = std::time::Duration::ZERO;
    let mut evict = || {
        let began = std::time::Instant::now();
        for i in (0..junk.len()).step_by(64) {
            junk[i] = junk[i].wrapping_add(1);
        }
        std::hint::black_box(&junk);
        evicting += began.elapsed();
    };
    let began = std::time::Instant::now();
    for _ in 0..turns {
        one_turn(&policy, &mut host, &request, &answer, &mut evict);
    }
    let total = began.elapsed();
    eprintln!(
        "profiling chat_4k_turns: {:.2} µs per turn of {kib} KiB ({evict_kib} KiB evicted between callbacks)",
        total.saturating_sub(evicting).as_secs_f64() * 1e6 / turns as f64
    );
    assert!(host.local_reply.is_none());
    assert_eq!(
        host.counters
            .get("livecheck.bench.out-iban.passed")
            .copied(),
        Some(turns as u64)
    );
}
