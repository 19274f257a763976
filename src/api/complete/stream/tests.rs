use std::rc::Rc;

use serde_json::{json, Value};

use crate::api::{Api, Request};
use crate::config::{Policy, Version};
use crate::sse;
use crate::stream::caller::{decode, read_by_caller, rewrite, upstream};
use crate::stream::{Hold, Rewriter};

use super::Complete;

const API: Api = Api::AnthropicComplete;

/// A rule on passwords (check 0) and a judged check (1): in `Hold::Rules` only the rule is read.
const POLICY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
  "blocked_reply": "Sorry, I can't share that.",
  "live_checks": [
    {"name": "no-passwords", "stage": "output", "kind": "not_contains", "expected": "password"},
    {"name": "polite", "stage": "output", "kind": "polite_tone"}
  ]}}}}}"#;

fn version() -> Rc<Version> {
    Policy::from_json(POLICY.as_bytes())
        .unwrap()
        .select(None, None, None)
        .unwrap()
}

fn deltas(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| (*p).to_owned()).collect()
}

fn events(bytes: &[u8]) -> Vec<(Option<String>, Value)> {
    let mut decoder = sse::Decoder::new(1 << 20);
    let mut events = Vec::new();
    decoder.push(bytes, &mut events).unwrap();
    decoder.finish(&mut events).unwrap();
    events
        .into_iter()
        .map(|e| (e.event, serde_json::from_str(&e.data).unwrap()))
        .collect()
}

/// The last event a caller received: the vendor's end of an answer.
fn ends_as_the_vendor_ends(bytes: &[u8]) {
    let events = events(bytes);
    let (name, last) = events.last().unwrap();
    assert_eq!(name.as_deref(), Some("completion"));
    assert_eq!(last["completion"], json!(""));
    assert_eq!(last["stop_reason"], json!("stop_sequence"));
    let stops = events
        .iter()
        .filter(|(_, e)| e.get("stop_reason").is_some_and(|r| !r.is_null()))
        .count();
    assert_eq!(stops, 1, "one event says the stop reason");
}

#[test]
fn a_clean_stream_passes_as_it_came_however_it_is_split() {
    let body = upstream(API, &deltas(&[" Hello", ", my name", " is Claude."]));
    for size in [1, 5, 17, body.len()] {
        let done = rewrite(API, Hold::Rules, &version(), &body, size, 1 << 20);
        assert_eq!(done.cut, None);
        assert_eq!(
            String::from_utf8(done.out).unwrap(),
            String::from_utf8(body.clone()).unwrap(),
            "size {size}"
        );
    }
}

#[test]
fn a_match_across_events_is_cut_where_it_starts_and_never_sent() {
    let body = upstream(API, &deltas(&[" Your pass", "wo", "rd is hunter2", " ok"]));
    let mut shapes = None;
    for size in 1..=body.len() {
        let done = rewrite(API, Hold::Rules, &version(), &body, size, 1 << 20);
        assert_eq!(done.cut.map(|c| c.check), Some(Some(0)), "size {size}");
        let text = decode(API, &done.out).unwrap().text;
        assert_eq!(text, " Your ", "size {size}");
        ends_as_the_vendor_ends(&done.out);
        // What the caller reads is the same however the upstream was split.
        let read = read_by_caller(API, &done.out);
        assert_eq!(
            shapes.get_or_insert_with(|| read.clone()),
            &read,
            "size {size}"
        );
    }
}

#[test]
fn text_no_match_can_begin_in_goes_out_at_once() {
    let mut rw = Rewriter::new(
        API,
        version(),
        &Request {
            stream: true,
            ..Request::default()
        },
        Hold::Rules,
        1 << 20,
    );
    let body = b"event: completion\ndata: {\"type\":\"completion\",\"completion\":\"Hello there, pa\",\"stop_reason\":null,\"model\":\"m\"}\n\n";
    let step = rw.feed(body);
    // Only what could still begin "password" is held back.
    assert_eq!(decode(API, &step.out).unwrap().text, "Hello there, ");
}

#[test]
fn a_last_event_with_text_split_keeps_its_stop_reason_for_the_last_part() {
    let body = b"event: completion\ndata: {\"type\":\"completion\",\"id\":\"compl_1\",\"completion\":\" a pa\",\"stop_reason\":null,\"model\":\"m\"}\n\n\
event: completion\ndata: {\"type\":\"completion\",\"id\":\"compl_1\",\"completion\":\"th ok\",\"stop_reason\":\"stop_sequence\",\"model\":\"m\"}\n\n";
    for size in [1, 7, body.len()] {
        let done = rewrite(API, Hold::Rules, &version(), body, size, 1 << 20);
        assert_eq!(done.cut, None);
        assert_eq!(decode(API, &done.out).unwrap().text, " a path ok");
        let events = events(&done.out);
        let stops: Vec<_> = events
            .iter()
            .map(|(_, e)| e["stop_reason"].clone())
            .collect();
        assert_eq!(stops.last(), Some(&json!("stop_sequence")), "size {size}");
        assert_eq!(
            stops.iter().filter(|s| !s.is_null()).count(),
            1,
            "size {size}"
        );
    }
}

#[test]
fn a_held_round_cut_says_the_blocked_reply_and_ends_as_the_vendor_ends() {
    let mut rw = Rewriter::new(
        API,
        version(),
        &Request {
            stream: true,
            model: Some("claude-2.1".into()),
            ..Request::default()
        },
        Hold::WholeText,
        1 << 20,
    );
    let step = rw.feed(&upstream(API, &deltas(&[" Rude", " words."])));
    assert!(step.round_end.is_some());
    let cut = rw.cut(1);
    let all = [step.out, cut].concat();
    assert_eq!(
        decode(API, &all).unwrap().text,
        "Sorry, I can't share that."
    );
    ends_as_the_vendor_ends(&all);
    let events = events(&all);
    assert!(events.iter().all(|(_, e)| e.get("type").is_some()));
    // The events the filter wrote carry the upstream's id and model.
    assert!(events
        .iter()
        .filter(|(_, e)| e["type"] == "completion")
        .all(|(_, e)| e["id"] == "compl_1" && e["model"] == "m"));
}

#[test]
fn an_error_event_passes_and_an_unreadable_completion_is_unreadable() {
    let error = b"event: completion\ndata: {\"type\":\"completion\",\"completion\":\" Hi\",\"stop_reason\":null,\"model\":\"m\"}\n\n\
event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let done = rewrite(API, Hold::Rules, &version(), error, 1 << 10, 1 << 20);
    let events = events(&done.out);
    assert!(events
        .iter()
        .any(|(name, e)| name.as_deref() == Some("error")
            && e["error"]["type"] == "overloaded_error"));
    let bad = b"event: completion\ndata: {\"type\":\"completion\",\"completion\":7,\"stop_reason\":null}\n\n";
    let done = rewrite(API, Hold::Rules, &version(), bad, 1 << 10, 1 << 20);
    assert!(done.cut.is_some());
    assert!(decode(API, &done.out).unwrap().text.is_empty());
}

/// What a reader makes of an event that matters downstream: its lane, ends, its checked text, and
/// the bytes it goes out as.
fn seen(format: &mut Complete, data: &str) -> (String, bool, Vec<usize>, Vec<String>, Vec<u8>) {
    use crate::stream::format::Format;
    let unit = format
        .read(sse::Event {
            event: Some("completion".into()),
            data: data.to_owned(),
        })
        .unwrap();
    let texts = unit
        .texts
        .iter()
        .map(|t| {
            t.text.clone().unwrap_or_else(|| {
                unit.ev
                    .data()
                    .pointer(&t.pointer)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
        })
        .collect();
    let mut out = Vec::new();
    let (lane, terminal, ends) = (format!("{:?}", unit.lane), unit.terminal, unit.ends.clone());
    format.write(unit.ev, &mut out);
    (lane, terminal, ends, texts, out)
}

#[test]
fn an_event_a_template_reads_is_read_and_written_as_its_json_is() {
    use crate::stream::format::Format;
    const FIRST: &str = r#"{"type":"completion","id":"compl_1","completion":" Hel","stop_reason":null,"model":"m"}"#;
    let same_shape = [
        r#"{"type":"completion","id":"compl_1","completion":"lo, \"w\u00e9\"\n","stop_reason":null,"model":"m"}"#,
        "{\"type\":\"completion\",\"id\":\"compl_1\",\"completion\":\"naïve 日本\",\"stop_reason\":null,\"model\":\"m\"}",
    ];
    let other_shape = [
        // Another id, a stop reason, an empty text, a field more, a text JSON refuses.
        FIRST.replace("compl_1", "compl_2"),
        FIRST.replace(r#""stop_reason":null"#, r#""stop_reason":"stop_sequence""#),
        FIRST.replace(r#"" Hel""#, r#""""#),
        FIRST.replace(r#""model":"m""#, r#""model":"m","extra":1"#),
        FIRST.replace(r#"" Hel""#, r#""a\qb""#),
    ];
    for (next, read_by_template) in same_shape
        .iter()
        .map(|s| ((*s).to_owned(), true))
        .chain(other_shape.into_iter().map(|s| (s, false)))
    {
        let request = Request::default();
        let (mut with, mut without) = (Complete::new(&request), Complete::new(&request));
        without.without_templates();
        assert_eq!(seen(&mut with, FIRST), seen(&mut without, FIRST));
        assert_eq!(
            with.text_alone(next.as_bytes()).is_some(),
            read_by_template,
            "{next}"
        );
        if next.contains(r#""a\qb""#) {
            assert!(with
                .read(sse::Event {
                    event: Some("completion".into()),
                    data: next.clone(),
                })
                .is_err());
            continue;
        }
        assert_eq!(seen(&mut with, &next), seen(&mut without, &next), "{next}");
    }
}
