//! The hold-back's tests: what is held and found, read in every chunking, and reading ahead
//! checked against reading start by start (the reference).

use super::*;
use crate::pattern::{compile_forbidden_text, compile_pattern};

fn rules() -> RuleSet {
    RuleSet::streamed(&[
        (0, compile_pattern(r"NL\d{2}[A-Z]{4}\d{10}", 18).unwrap()),
        (2, compile_forbidden_text("secret").unwrap()),
    ])
    .unwrap()
}

fn pushed(rules: &RuleSet, pieces: &[&str]) -> (Holdback, Option<Found>) {
    let mut hb = Holdback::default();
    let mut found = None;
    for piece in pieces {
        hb.push(piece);
        found = found.or(hb.scan(rules));
    }
    (hb, found)
}

#[test]
fn text_that_cannot_start_a_match_is_not_held() {
    let rules = rules();
    let (hb, found) = pushed(&rules, &["word word word ", "é日本 and more"]);
    assert_eq!(found, None);
    assert_eq!(hb.confirmed(), hb.len());
    assert!(hb.window.chars().count() <= 1, "{:?}", hb.window);
}

#[test]
fn only_the_suffix_that_can_still_begin_a_match_is_held() {
    let rules = rules();
    let (hb, _) = pushed(&rules, &["pay to NL91AB"]);
    assert_eq!(hb.confirmed(), 7, "held from the N");
    assert!(
        !hb.threaded && hb.threads.is_empty(),
        "read ahead, no thread per start"
    );
    let (hb, _) = pushed(&rules, &["it is a sec"]);
    assert_eq!(hb.confirmed(), 8, "held from the s of sec");
    let (hb, _) = pushed(&rules, &["NL9 no"]);
    assert_eq!(hb.confirmed(), 6, "released once it cannot be an IBAN");
}

#[test]
fn a_match_is_certain_only_with_a_character_after_it() {
    let rules = RuleSet::streamed(&[(4, compile_pattern(r"\bcat\b", 3).unwrap())]).unwrap();
    let mut hb = Holdback::default();
    hb.push("a cat");
    assert_eq!(hb.scan(&rules), None);
    assert_eq!(hb.confirmed(), 2);
    hb.push("s");
    assert_eq!(hb.scan(&rules), None);
    assert_eq!(hb.confirmed(), 6);
    hb.push(" and a cat!");
    assert_eq!(hb.scan(&rules), Some(Found { pos: 13, check: 4 }));
}

#[test]
fn the_end_of_the_text_decides_what_was_held() {
    let rules = RuleSet::streamed(&[(4, compile_pattern(r"\bcat\b", 3).unwrap())]).unwrap();
    let mut hb = Holdback::default();
    hb.push("a cat");
    assert_eq!(hb.scan(&rules), None);
    hb.end();
    assert_eq!(hb.scan(&rules), Some(Found { pos: 2, check: 4 }));
    let mut hb = Holdback::default();
    hb.push("a ca");
    hb.end();
    assert_eq!(hb.scan(&rules), None);
    assert_eq!(hb.confirmed(), 4);
}

#[test]
fn a_match_split_over_pushes_is_found_where_it_starts() {
    let rules = rules();
    let (_, found) = pushed(
        &rules,
        &[
            "pay N",
            "L91AB",
            "NA0417",
            "164300 now",
            " and more text here",
        ],
    );
    assert_eq!(found, Some(Found { pos: 4, check: 0 }));
}

#[test]
fn at_one_start_the_earliest_check_that_matches_is_named() {
    let rules = RuleSet::streamed(&[
        (0, compile_pattern("abcd", 4).unwrap()),
        (1, compile_pattern("ab", 2).unwrap()),
    ])
    .unwrap();
    assert_eq!(
        pushed(&rules, &["xabcd!"]).1,
        Some(Found { pos: 1, check: 0 })
    );
    assert_eq!(
        pushed(&rules, &["xabcx!"]).1,
        Some(Found { pos: 1, check: 1 })
    );
}

#[test]
fn a_unicode_word_boundary_next_to_non_ascii_is_decided_by_a_search() {
    // The automaton gives up on non-ASCII beside a Unicode `\b`; the search decides instead.
    let rules = RuleSet::streamed(&[(1, compile_pattern(r"\bgeheim\b", 6).unwrap())]).unwrap();
    assert_eq!(
        pushed(&rules, &["ééé geheim é"]).1,
        Some(Found { pos: 4, check: 1 })
    );
    assert_eq!(pushed(&rules, &["éégeheim é"]).1, None);
    let (hb, found) = pushed(&rules, &["é geheimnis und mehr text"]);
    assert_eq!((found, hb.confirmed()), (None, hb.len()));
    // At é (and after it), the automaton cannot judge a start: it is held until the longest
    // match fits after it, as a fixed window would hold it.
    let (mut hb, _) = pushed(&rules, &["égeh"]);
    assert_eq!(hb.confirmed(), 0);
    hb.push("eimnis");
    assert_eq!(hb.scan(&rules), None);
    assert_eq!(hb.confirmed(), hb.len());
}

#[test]
fn text_that_could_each_begin_a_match_keeps_no_more_than_the_longest_match() {
    // Every letter could begin an address: at most the longest match's starts are alive, and
    // the text held and kept is no longer, however long the run.
    let rules = RuleSet::streamed(&[(0, compile_pattern("[a-z]{1,5}@x", 7).unwrap())]).unwrap();
    let mut hb = Holdback::default();
    for _ in 0..1000 {
        hb.push("a");
        assert_eq!(hb.scan(&rules), None);
        assert!(hb.threads.len() <= rules.longest(), "{}", hb.threads.len());
        assert!(hb.len() - hb.confirmed() <= rules.longest());
        assert!(hb.window.chars().count() <= rules.longest() + 1);
    }
}

#[test]
fn without_rules_or_passive_everything_is_confirmed() {
    let none = RuleSet::streamed(&[]).unwrap();
    let (hb, found) = pushed(&none, &["a sec", "ret NL91"]);
    assert_eq!((found, hb.confirmed()), (None, 13));
    let mut passive = Holdback::passive();
    passive.push("a sec");
    assert_eq!(passive.confirmed(), 5);
}

#[test]
fn rules_whose_prefixes_are_too_large_to_read_ahead_are_read_start_by_start() {
    let rules =
        RuleSet::streamed(&[(0, compile_pattern(r"\w{1,64}@\w{1,63}", 128).unwrap())]).unwrap();
    let text = "write to ana@example now, or to bob";
    let whole = rules.first_hit(text).map(|h| Found {
        pos: h.start,
        check: h.check,
    });
    assert_eq!(whole, Some(Found { pos: 9, check: 0 }));
    for size in [1, 3, text.len()] {
        let mut hb = Holdback::default();
        let mut found = None;
        for piece in text.as_bytes().chunks(size) {
            hb.push(std::str::from_utf8(piece).unwrap());
            found = found.or(hb.scan(&rules));
            assert!(hb.confirmed() <= 9, "released a match");
        }
        hb.end();
        assert_eq!(found.or(hb.scan(&rules)), whole, "in pieces of {size}");
        assert!(hb.threaded);
    }
}

#[test]
fn a_rule_set_built_for_searches_only_holds_by_search_and_releases_no_match() {
    let rules =
        RuleSet::new(&[(0, compile_pattern(r"NL\d{2}[A-Z]{4}\d{10}", 18).unwrap())]).unwrap();
    let (_, found) = pushed(&rules, &["pay NL91ABNA0417164300 now"]);
    assert_eq!(found, Some(Found { pos: 4, check: 0 }));
    let (hb, _) = pushed(&rules, &["word word word word word"]);
    assert_eq!(hb.confirmed(), hb.len() - rules.longest());
}

/// Rules over a small alphabet, ASCII word boundaries included, for exhaustive checks.
fn small_rules() -> RuleSet {
    RuleSet::streamed(&[
        (0, compile_pattern("aab", 3).unwrap()),
        (1, compile_pattern(r"(?-u:\b)ba(?-u:\b)", 2).unwrap()),
        (3, compile_pattern("N[ab]{1,2}", 3).unwrap()),
    ])
    .unwrap()
}

const ALPHABET: [char; 4] = ['a', 'b', ' ', 'N'];

/// Every text of exactly `len` characters of the alphabet.
fn texts(len: usize) -> Vec<String> {
    texts_of(&ALPHABET, len)
}

fn texts_of(alphabet: &[char], len: usize) -> Vec<String> {
    (0..len).fold(vec![String::new()], |texts, _| {
        texts
            .iter()
            .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
            .collect()
    })
}

/// Where the held text must start: the first position at which some continuation of `text`
/// makes a match begin (decided by searches, not by the automaton); the length when none.
fn must_hold_from(
    rules: &RuleSet,
    text: &str,
    memo: &mut std::collections::HashMap<String, usize>,
) -> usize {
    if let Some(&held) = memo.get(text) {
        return held;
    }
    let continuations: Vec<String> = (0..=rules.longest() + 1).flat_map(texts).collect();
    let held = (0..text.len())
        .find(|&s| {
            continuations
                .iter()
                .any(|w| rules.match_at(&format!("{text}{w}"), s).is_some())
        })
        .unwrap_or(text.len());
    memo.insert(text.to_owned(), held);
    held
}

#[test]
fn exhaustively_nothing_is_held_that_cannot_begin_a_match_and_no_match_is_released() {
    let rules = small_rules();
    let mut memo = std::collections::HashMap::new();
    // Scans that ended reading ahead, and start by start: both ways are checked.
    let (mut ahead, mut threaded) = (0, 0);
    for text in texts(5) {
        let whole = rules.first_hit(&text);
        let mut hb = Holdback::default();
        let mut found = None;
        for (i, c) in text.char_indices() {
            hb.push(&c.to_string());
            found = found.or(hb.scan(&rules));
            if hb.threaded {
                threaded += 1;
            } else {
                ahead += 1;
            }
            let prefix = &text[..=i];
            if found.is_none() {
                assert_eq!(
                    hb.confirmed(),
                    must_hold_from(&rules, prefix, &mut memo),
                    "{text:?} after {prefix:?}"
                );
            }
            if let Some(hit) = whole {
                assert!(hb.confirmed() <= hit.start, "{text:?} released a match");
            }
        }
        hb.end();
        found = found.or(hb.scan(&rules));
        let expected = whole.map(|h| Found {
            pos: h.start,
            check: h.check,
        });
        assert_eq!(found, expected, "{text:?} read a character at a time");
        let mut at_once = Holdback::default();
        at_once.push(&text);
        let first = at_once.scan(&rules);
        at_once.end();
        assert_eq!(first.or(at_once.scan(&rules)), expected, "{text:?} at once");
    }
    assert!(
        ahead > 500 && threaded > 500,
        "{ahead} ahead, {threaded} threaded"
    );
}

/// Reading ahead holds exactly what reading start by start holds, and finds the same match,
/// after every piece of random texts read in random pieces, with the bench's rules (an e-mail
/// address's counted repetitions, an IBAN, a card number, an API key, a forbidden word).
#[cfg(not(target_arch = "wasm32"))]
mod ahead_equals_threads {
    use super::*;
    use proptest::prelude::*;

    fn bench_rules() -> RuleSet {
        RuleSet::streamed(&[
            (0, compile_forbidden_text("project-bluebird").unwrap()),
            (1, compile_pattern("[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}", 34).unwrap()),
            (2, compile_pattern("[0-9]{4}[ -]?[0-9]{4}[ -]?[0-9]{4}[ -]?[0-9]{4}", 19).unwrap()),
            (
                3,
                compile_pattern(
                    r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63}){0,1}\.[A-Za-z]{2,6}",
                    200,
                )
                .unwrap(),
            ),
            (4, compile_pattern("sk-[A-Za-z0-9]{32}", 35).unwrap()),
        ])
        .unwrap()
    }

    const PIECES: [&str; 16] = [
        "word ", "ana", "@", "example", ".", "com", " ", "NL91", "ABNA", "0417", "1643", "-",
        "sk-", "Ab3", "project", "é",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn same_holds_and_finds(
            parts in prop::collection::vec(0..PIECES.len(), 0..80),
            sizes in prop::collection::vec(1usize..12, 1..8),
        ) {
            let rules = bench_rules();
            let text: String = parts.iter().map(|&i| PIECES[i]).collect();
            let mut ahead = Holdback::default();
            let mut threads = Holdback { threaded: true, threads_only: true, ..Holdback::default() };
            let (mut found_ahead, mut found_threads) = (None, None);
            let chars: Vec<char> = text.chars().collect();
            let mut at = 0;
            for &size in sizes.iter().cycle() {
                if at >= chars.len() {
                    break;
                }
                let piece: String = chars[at..(at + size).min(chars.len())].iter().collect();
                at += size;
                ahead.push(&piece);
                threads.push(&piece);
                found_ahead = found_ahead.or(ahead.scan(&rules));
                found_threads = found_threads.or(threads.scan(&rules));
                prop_assert_eq!(found_ahead, found_threads, "{:?} at {}", text, at);
                if found_ahead.is_none() {
                    prop_assert_eq!(ahead.confirmed(), threads.confirmed(), "{:?} at {}", text, at);
                }
            }
            ahead.end();
            threads.end();
            found_ahead = found_ahead.or(ahead.scan(&rules));
            found_threads = found_threads.or(threads.scan(&rules));
            prop_assert_eq!(found_ahead, found_threads, "{:?} at the end", text);
            let whole = rules.first_hit(&text).map(|h| Found {
                pos: text[..h.start].chars().count(),
                check: h.check,
            });
            prop_assert_eq!(found_ahead, whole, "{:?}", text);
        }
    }
}

#[test]
fn a_cache_cleared_every_few_states_changes_no_finding() {
    // The smallest cache: the states threads hold are thrown away again and again, mid-read
    // too; a thread whose state went is decided by a search, never by a stale state.
    let rules = [
        (0, compile_pattern("aab", 3).unwrap()),
        (1, compile_pattern(r"(?-u:\b)ba(?-u:\b)", 2).unwrap()),
        (3, compile_pattern("N[ab]{1,2}", 3).unwrap()),
        (4, compile_pattern("[ab]{2,6}N", 7).unwrap()),
    ];
    let mut texts = texts(5);
    texts.push("ab ba aaab Nab abababN bba N".repeat(20));
    // With the word boundary, and without (then every start is one state, looked up once).
    for rules in [&rules[..], &[&rules[..1], &rules[2..]].concat()] {
        let clearing = RuleSet::streamed_clearing(rules).unwrap();
        let roomy = RuleSet::streamed(rules).unwrap();
        for text in &texts {
            let whole = roomy.first_hit(text).map(|h| Found {
                pos: h.start,
                check: h.check,
            });
            for pieces in [text.len(), 1, 3] {
                let mut hb = Holdback::default();
                let mut found = None;
                for piece in text.as_bytes().chunks(pieces.max(1)) {
                    hb.push(std::str::from_utf8(piece).unwrap());
                    found = found.or(hb.scan(&clearing));
                    if let Some(hit) = whole {
                        assert!(hb.confirmed() <= hit.pos, "{text:?} released a match");
                    }
                }
                hb.end();
                assert_eq!(found.or(hb.scan(&clearing)), whole, "{text:?} in {pieces}s");
            }
        }
        let clears = clearing.automaton().map_or(0, |a| a.clears());
        assert!(clears > 100, "the cache was cleared {clears} times");
    }
}

#[test]
fn exhaustively_folded_text_is_read_as_the_whole_text_is_searched() {
    // A ligature that folds to two letters, a full-width letter and a zero-width space, around
    // rules that begin inside the ligature, span it, and need a word boundary.
    let rules = RuleSet::streamed(&[
        (0, compile_pattern("ffa", 3).unwrap()),
        (1, compile_pattern(r"(?-u:\b)if(?-u:\b)", 2).unwrap()),
        (2, compile_forbidden_text("ia").unwrap()),
    ])
    .unwrap();
    let alphabet = ['f', 'a', 'i', ' ', '\u{FB01}', '\u{200B}', '\u{FF46}'];
    for text in texts_of(&alphabet, 5) {
        let whole = rules.first_hit(&text).map(|h| Found {
            pos: text[..h.start].chars().count(),
            check: h.check,
        });
        let mut hb = Holdback::default();
        let mut found = None;
        for c in text.chars() {
            hb.push(&c.to_string());
            found = found.or(hb.scan(&rules));
            if let Some(hit) = whole {
                assert!(hb.confirmed() <= hit.pos, "{text:?} released a match");
            }
        }
        hb.end();
        found = found.or(hb.scan(&rules));
        assert_eq!(found, whole, "{text:?} read a character at a time");
        let mut at_once = Holdback::default();
        at_once.push(&text);
        let first = at_once.scan(&rules);
        at_once.end();
        assert_eq!(first.or(at_once.scan(&rules)), whole, "{text:?} at once");
    }
}

#[test]
fn in_a_ligature_the_match_at_its_first_folded_letter_is_named() {
    // "ﬃ" folds to "ffi": the search finds "f" first (check 2); "i", an earlier check, starts
    // later in the folded text, at the same character as written. (The x{0,5} keeps the
    // match uncertain until the text ends, while a later start could still name another.)
    let rules = RuleSet::streamed(&[
        (0, compile_forbidden_text("i").unwrap()),
        (2, compile_pattern("fx{0,5}", 6).unwrap()),
    ])
    .unwrap();
    let hit = rules.first_hit("a \u{FB03}").unwrap();
    let expected = Some(Found { pos: 2, check: 2 });
    assert_eq!(hit.check, 2);
    for pieces in [&["a \u{FB03}"][..], &["a ", "\u{FB03}"]] {
        let (mut hb, found) = pushed(&rules, pieces);
        hb.end();
        assert_eq!(found.or(hb.scan(&rules)), expected, "{pieces:?}");
    }
}

#[test]
fn invisible_characters_inside_forbidden_text_do_not_hide_it_from_a_stream() {
    let rules = rules();
    let (_, found) = pushed(&rules, &["the se", "\u{200B}", "c\u{00AD}r", "ｅt is out"]);
    assert_eq!(found, Some(Found { pos: 4, check: 2 }));
    // However many invisible characters follow a start, it is held, never released early.
    let mut hb = Holdback::default();
    hb.push("a sec");
    for _ in 0..500 {
        hb.push("\u{200B}");
        assert_eq!(hb.scan(&rules), None);
        assert_eq!(hb.confirmed(), 2);
    }
    hb.push("ret");
    hb.push(" more");
    assert_eq!(hb.scan(&rules), Some(Found { pos: 2, check: 2 }));
}
