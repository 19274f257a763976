//! Text that reads the same to a model matches the same (issue 18; the list is
//! docs/normalization.md): rule checks read text folded, on input and output, streamed and not,
//! through the built `.wasm` in the harness. What the caller receives is never rewritten, and a
//! cut lands at the first character of the match as written.

#![allow(clippy::unwrap_used)]

mod common;

use common::fixtures::*;
use common::*;

/// `password` forbidden in questions and answers; no recovery, no judge: rules decide alone.
const NO_PASSWORD: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
    "blocked_reply": "Not allowed.",
    "live_checks": [
        {"name": "asked", "stage": "input", "kind": "not_contains", "expected": "password"},
        {"name": "told", "stage": "output", "kind": "not_contains", "expected": "password"},
        {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
         "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18}]}}}}}"#;

/// Each way of writing `password` that reads as `password`, one per item of the written list.
const DISGUISED: [(&str, &str); 9] = [
    ("zero-width space", "pass\u{200B}word"),
    (
        "zero-width joiner and non-joiner",
        "pa\u{200D}ss\u{200C}word",
    ),
    ("word joiner", "pass\u{2060}word"),
    ("soft hyphen", "pass\u{00AD}word"),
    ("byte order mark", "\u{FEFF}pass\u{FEFF}word"),
    ("bidi controls", "\u{202E}pass\u{2066}word\u{2069}\u{202C}"),
    (
        "Unicode tag characters",
        "pass\u{E0070}\u{E0077}word\u{E007F}",
    ),
    ("full-width letters", "ｐａｓｓｗｏｒｄ"),
    ("mathematical letters", "𝐩𝐚𝐬𝐬𝐰𝐨𝐫𝐝"),
];

#[test]
fn a_disguised_forbidden_question_is_refused_in_every_vendor_and_chunking() {
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            for (what, word) in DISGUISED {
                let mut host = livecheck(NO_PASSWORD);
                let body = vendor.request(&format!("my {word} is hunter2"), false);
                let s = send_request(&mut host, vendor.path(), &[], &body, chunking);
                assert!(question_held(&host, s), "{what} {vendor:?} {chunking:?}");
                let caller = host.caller_received(s);
                assert_eq!(
                    caller.header("x-core-check"),
                    Some(r#"stage=input, check="asked", code=input_check_failed"#),
                    "{what} {vendor:?} {chunking:?}"
                );
            }
        }
    }
}

#[test]
fn an_invisible_character_written_as_a_json_escape_is_removed_too() {
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            let body = vendor
                .request("my pass-word is hunter2", false)
                .replace("pass-word", r"pass\u200bword");
            let mut host = livecheck(NO_PASSWORD);
            let s = send_request(&mut host, vendor.path(), &[], &body, chunking);
            assert!(question_held(&host, s), "{vendor:?} {chunking:?}");
        }
    }
}

#[test]
fn a_question_that_only_looks_alike_is_not_folded_and_passes() {
    // Cyrillic "а" and "о" are other letters, not compatibility forms: they are not folded.
    for vendor in VENDORS {
        let mut host = livecheck(NO_PASSWORD);
        let body = vendor.request("my pаsswоrd is hunter2", false);
        let s = send_request(&mut host, vendor.path(), &[], &body, Chunking::Whole);
        assert_eq!(host.upstream_received(s).body_text(), body, "{vendor:?}");
    }
}

#[test]
fn a_disguised_forbidden_answer_is_withheld() {
    for vendor in VENDORS {
        for (what, word) in DISGUISED
            .iter()
            .copied()
            .chain([("full-width IBAN", "ＮＬ91ＡＢＮＡ0417164300")])
        {
            let mut host = livecheck(NO_PASSWORD);
            let s = send_request(
                &mut host,
                vendor.path(),
                &[],
                &vendor.request(CLEAN_QUESTION, false),
                Chunking::Whole,
            );
            let answer = vendor.answer(&format!("Your {word} is ready."));
            send_answer(
                &mut host,
                s,
                &[("content-type", "application/json")],
                &answer,
                Chunking::Bytes(7),
            );
            let caller = host.caller_received(s);
            let reply = json(&caller.body);
            assert_eq!(vendor.text_of(&reply), "Not allowed.", "{what} {vendor:?}");
            assert_eq!(vendor.stop_marker(&reply), vendor.refused_marker());
        }
    }
}

#[test]
fn a_disguised_match_in_a_stream_is_cut_at_its_first_character_as_written() {
    let cases: [(&[&str], &str); 4] = [
        (&["Your pass", "\u{200B}", "word is here."], "Your "),
        (&["Your ｐａｓ", "ｓｗｏｒｄ is here."], "Your "),
        (
            &["ok\u{200B} \u{00AD}", "pa\u{00AD}ssword!"],
            "ok\u{200B} \u{00AD}",
        ),
        (&["Pay ＮＬ9", "1ABNA0417164300 today."], "Pay "),
    ];
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            for (pieces, delivered) in cases {
                let got = read_stream(vendor, &streamed(vendor, pieces, chunking));
                assert_eq!(got.text, delivered, "{pieces:?} {vendor:?} {chunking:?}");
            }
        }
    }
}

#[test]
fn clean_text_with_invisible_and_full_width_characters_arrives_as_written() {
    let pieces = ["ｈｅｌｌｏ\u{200B}", " wo\u{FB01}", "ld \u{202E}done"];
    for vendor in VENDORS {
        for chunking in CHUNKINGS {
            let upstream = stream(vendor, &pieces).concat();
            let received = streamed(vendor, &pieces, chunking);
            assert_eq!(received, upstream, "{vendor:?} {chunking:?}");
        }
    }
}

/// A clean question asked with NO_PASSWORD, answered by a stream of `pieces` split by
/// `chunking`: what the caller received.
fn streamed(vendor: Vendor, pieces: &[&str], chunking: Chunking) -> String {
    let mut host = livecheck(NO_PASSWORD);
    let s = send_request(
        &mut host,
        vendor.path(),
        &[],
        &vendor.request(CLEAN_QUESTION, true),
        Chunking::Whole,
    );
    let body = stream(vendor, pieces).concat();
    send_answer(
        &mut host,
        s,
        &[("content-type", "text/event-stream")],
        &body,
        chunking,
    );
    host.caller_received(s).body_text()
}
