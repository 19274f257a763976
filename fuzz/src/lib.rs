//! What several fuzz targets share: a compiled policy, and one streamed answer through the rewriter.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use livecheck::api::{Api, Request};
use livecheck::config::{Policy, Version};
use livecheck::stream::{CutWhy, Hold, Rewriter, Step};

/// The published version of a policy the target itself wrote, compiled once per thread (`Rc` is
/// not `Sync`; libFuzzer runs a target on one thread). A refusal is the target's own bug.
pub fn version_of(policy: &'static str) -> Rc<Version> {
    thread_local! {
        static COMPILED: RefCell<HashMap<&'static str, Rc<Version>>> = RefCell::default();
    }
    COMPILED.with(|compiled| {
        let mut compiled = compiled.borrow_mut();
        let version = compiled.entry(policy).or_insert_with(|| {
            Policy::from_json(policy.as_bytes())
                .ok()
                .and_then(|p| p.select(None, None, None).ok())
                .unwrap_or_else(|| panic!("the target's policy is refused"))
        });
        Rc::clone(version)
    })
}

/// The bytes a caller receives for an upstream `body` fed in `size`-byte chunks: a held round is
/// released, or cut when a rule of the version matches its text (as the turn decides it).
pub fn rewrite(api: Api, hold: Hold, version: &Rc<Version>, body: &[u8], size: usize) -> Vec<u8> {
    rewrite_limited(api, hold, version, body, size).0
}

/// [`rewrite`], and whether the stream met the limit of what a held round may keep: cut as
/// unreadable (`CutWhy::Unreadable`, which a stream that cannot be read is cut as too) or gone on
/// unjudged ([`livecheck::stream::Step::unjudged`]).
pub fn rewrite_limited(
    api: Api,
    hold: Hold,
    version: &Rc<Version>,
    body: &[u8],
    size: usize,
) -> (Vec<u8>, bool) {
    let request = Request {
        stream: true,
        ..Request::default()
    };
    let mut rw = Rewriter::new(api, Rc::clone(version), &request, hold, 1 << 16);
    let mut out = Vec::new();
    let mut round = None;
    let mut limited = false;
    let mut take = |step: Step| {
        out.extend(step.out);
        if round.is_none() {
            round = step.round_end;
        }
        limited |= step.unjudged || step.cut.is_some_and(|c| c.why == CutWhy::Unreadable);
    };
    for chunk in body.chunks(size.max(1)) {
        take(rw.feed(chunk));
    }
    take(rw.finish());
    if let Some(round) = round {
        let hit = round.early.or_else(|| {
            version
                .output_rules
                .first_hit(&round.rule_text)
                .map(|h| h.check)
        });
        match hit {
            Some(check) => out.extend(rw.cut(check)),
            None => out.extend(rw.release()),
        }
    }
    (out, limited)
}
