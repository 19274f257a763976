//! Each vendor's stream rewriter, fed an upstream stream in chunks, under every hold: never panics;
//! what the caller receives is valid in the vendor's format, never holds a match of an output rule
//! (a match of the answer's text: text cut before a match may look like one on its own), reads
//! the same however the upstream was chunked (`caller::read_by_caller`: where the text is divided
//! among the events may differ), and its text is a prefix of the upstream's (under `Hold::Rules`
//! exactly the text before the first match; in the whole-text holds a cut says the version's
//! blocked reply instead).
//!
//! Input: a mode byte (vendor, hold, and whether the rest is raw upstream bytes or an answer text
//! the target writes as the vendor's stream), a chunk-size byte, then the bytes.

use livecheck::api::Api;
use livecheck::stream::{caller, Hold};

use crate::{rewrite, version_of};

const POLICY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
  "live_checks": [
    {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
     "pattern": "\\bNL\\d{2}[A-Z]{4}\\d{10}\\b", "max_match": 18},
    {"name": "no-passwords", "stage": "output", "kind": "not_contains", "expected": "password"}
  ]}}}}}"#;

const APIS: [Api; 7] = [
    Api::AnthropicMessages,
    Api::ChatCompletions,
    Api::Responses,
    Api::Completions,
    Api::AnthropicComplete,
    Api::Gemini,
    Api::Converse,
];
const HOLDS: [Hold; 3] = [Hold::Rules, Hold::WholeText, Hold::Everything];

/// Pieces a byte above 0x7f stands for: near the rules, multi-byte, and what JSON escapes.
const PIECES: [&str; 10] = [
    "NL91ABNA0417164300",
    "password",
    "PassWord",
    "pass",
    "NL",
    "é",
    "日本",
    "😀",
    "\"\\",
    "\n",
];

fn text_of(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            0..=0x7f => char::from(b).to_string(),
            _ => PIECES[usize::from(b) % PIECES.len()].to_owned(),
        })
        .collect()
}

/// The target's body: panics when `input` breaks one of the properties above.
pub fn check(input: &[u8]) {
    let [mode, size, body @ ..] = input else {
        return;
    };
    let api = APIS[usize::from(*mode) % APIS.len()];
    let hold = HOLDS[usize::from(*mode) / APIS.len() % 3];
    let raw = usize::from(*mode) / APIS.len() / 3 % 2 == 1;
    let version = version_of(POLICY);
    let rules = &version.output_rules;
    let (upstream, sent) = if raw {
        let sent = caller::decode(api, body).ok().map(|d| d.text);
        (body.to_vec(), sent)
    } else {
        // Deltas of 1 to 8 characters, sizes from the chunk-size byte.
        let text = text_of(body);
        let chars: Vec<char> = text.chars().collect();
        let n = usize::from(*size % 8) + 1;
        let deltas: Vec<String> = chars.chunks(n).map(|c| c.iter().collect()).collect();
        (caller::upstream(api, &deltas), Some(text))
    };
    let size = usize::from(*size) + 1;
    let out = rewrite(api, hold, &version, &upstream, size);
    let whole = rewrite(api, hold, &version, &upstream, upstream.len());
    // Where the text is divided among the events may differ (text confirmed by a later event of
    // the same chunk goes whole, text confirmed only by a later chunk in two parts); what the
    // caller reads does not. An event split in two is written as the vendor's parts (Chat's rest
    // a bare chunk, its finish reason moved to it): from raw bytes of a shape the vendor does not
    // write (fields it has no name for, a finish reason left out), only the text is the same. In
    // the whole-text holds the events beside the held answer (pings, the message's start,
    // reasoning, tool calls) stream while it is held, so how far they run ahead of it depends on
    // where the chunks end: the same events, in another order.
    //
    // A held round that met the limit of what it may keep is compared too: the limit is met at
    // the same upstream byte however the stream was split (`Rewriter::feed`).
    let (chunked, whole) = (
        caller::read_by_caller(api, &out),
        caller::read_by_caller(api, &whole),
    );
    if raw {
        assert_eq!(
            chunked.0, whole.0,
            "the caller's text depends on the chunking"
        );
    } else if hold == Hold::Rules {
        assert_eq!(
            chunked, whole,
            "what the caller reads depends on the chunking"
        );
    } else {
        // A round gone on unjudged past the limit streams under the rules from there: its text
        // divided among events as the chunks fell, between pings that ran ahead: each event once.
        let sorted = |(text, mut events): (Option<String>, Vec<_>)| {
            events.sort();
            events.dedup();
            (text, events)
        };
        assert_eq!(
            sorted(chunked),
            sorted(whole),
            "what the caller reads depends on the chunking"
        );
    }
    // Garbage in may come out as the upstream wrote it: what the caller reads is judged only when
    // the upstream itself was valid in the vendor's format.
    let seen = match (caller::decode(api, &out), &sent) {
        (Ok(d), _) => d.text,
        (Err(e), Some(_)) => panic!("the caller got bytes out of the vendor's format: {e}"),
        (Err(_), None) => return,
    };
    let Some(sent) = sent else {
        return;
    };
    let shown = match hold {
        Hold::Rules => seen.as_str(),
        _ => seen
            .strip_suffix(version.blocked_reply.as_str())
            .unwrap_or(&seen),
    };
    assert!(
        sent.starts_with(shown),
        "the caller's text is not a prefix of the upstream's"
    );
    // No match of the answer reaches the caller. Text cut just before a match may look like one on
    // its own (`\b` at its end, where the answer went on with a letter): that is no match of the
    // answer, as the stream property tests say too.
    if let Some(hit) = rules.first_hit(&seen) {
        assert!(
            hit.start < shown.len() && rules.match_at(&sent, hit.start).is_none(),
            "the caller decoded a match"
        );
    }
    if hold == Hold::Rules && !raw {
        let before = rules
            .first_hit(&sent)
            .map_or(sent.as_str(), |h| &sent[..h.start]);
        assert_eq!(
            seen, before,
            "the caller did not get all the text before the first match"
        );
    }
}
