//! `livecheck eval POLICY --version V [--against V2] SUITE --wasm FILE [--upstream URL]
//! [--judge URL] [--show-text] [--format text|json]`: an evaluation run. Every turn of the suite
//! goes through the version's blocking checks, recovery included, in the built filter (the
//! harness), as a caller would get it; background checks are skipped (the filter leaves them to
//! the sidecar, which is not asked to judge them here). Prints each check's pass rate and, with
//! `--against`, both versions side by side with the turns whose outcome differs (ids only unless
//! `--show-text`).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};

use crate::args::Args;
use crate::cases::{read_suite, Outcome, SuiteLine, TurnOutcome};
use crate::drive::{Filter, Happened, TurnError};
use crate::expect::describe;
use crate::http::Endpoint;

pub const USAGE: &str = "livecheck eval POLICY.json --version V [--against V2] SUITE.jsonl --wasm livecheck.wasm [--upstream URL] [--judge URL] [--show-text] [--format text|json]";

/// One version's run of the suite.
struct Run {
    version: String,
    /// Per turn id: what happened, or why it could not run.
    turns: BTreeMap<String, Result<Happened, TurnError>>,
}

/// A check's results over the suite: passed, failed, errored (each turn's last answer).
#[derive(Default, Clone, Copy)]
struct Tally {
    passed: usize,
    failed: usize,
    errored: usize,
}

impl Tally {
    fn total(self) -> usize {
        self.passed + self.failed + self.errored
    }

    fn rate(self) -> Option<f64> {
        (self.total() > 0).then(|| self.passed as f64 / self.total() as f64)
    }
}

impl Run {
    fn tallies(&self) -> BTreeMap<String, Tally> {
        let mut out: BTreeMap<String, Tally> = BTreeMap::new();
        for h in self.turns.values().flatten() {
            let names: std::collections::BTreeSet<&str> =
                h.results.iter().map(|r| r.name.as_str()).collect();
            for name in names {
                let t = out.entry(name.to_owned()).or_default();
                match h.result_of(name) {
                    Some(Outcome::Passed) => t.passed += 1,
                    Some(Outcome::Failed) => t.failed += 1,
                    Some(Outcome::Errored) | None => t.errored += 1,
                }
            }
        }
        out
    }

    fn outcomes(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for h in self.turns.values().flatten() {
            *out.entry(h.outcome.as_str()).or_insert(0) += 1;
        }
        out
    }

    fn errors(&self) -> Vec<(&str, &TurnError)> {
        self.turns
            .iter()
            .filter_map(|(id, r)| r.as_ref().err().map(|e| (id.as_str(), e)))
            .collect()
    }
}

/// Runs the command.
pub fn main(args: &[String]) -> ExitCode {
    let args = match Args::parse(
        args,
        &[
            "--version",
            "--against",
            "--wasm",
            "--upstream",
            "--judge",
            "--format",
        ],
        &["--show-text"],
    ) {
        Ok(a) => a,
        Err(e) => return usage(&e.to_string()),
    };
    let format = args.value("--format").unwrap_or_else(|| "text".into());
    if !matches!(format.as_str(), "text" | "json") {
        return usage(&format!("--format is text or json, not {format}"));
    }
    let (Some(version), Some(wasm)) = (args.value("--version"), args.value("--wasm")) else {
        return usage("--version and --wasm are required");
    };
    let [policy, suite] = args.positional.as_slice() else {
        return usage("give one policy and one suite");
    };
    let upstream = match args
        .value("--upstream")
        .map(|u| Endpoint::parse(&u))
        .transpose()
    {
        Ok(u) => u,
        Err(e) => return usage(&e.to_string()),
    };
    let fail = |e: String| {
        eprintln!("livecheck eval: {e}");
        ExitCode::from(2)
    };
    let filter = match Filter::load(
        Path::new(&wasm),
        Path::new(policy),
        args.value("--judge").as_deref(),
    ) {
        Ok(f) => f,
        Err(e) => return fail(e.to_string()),
    };
    let lines = match read_suite(Path::new(suite)) {
        Ok(l) => l,
        Err(e) => return fail(format!("{suite}: {e}")),
    };
    let mut versions = vec![version];
    versions.extend(args.value("--against"));
    let runs: Vec<Run> = versions
        .iter()
        .map(|v| run(&filter, &lines, v, upstream.as_ref()))
        .collect();
    let show_text = args.flag("--show-text");
    if format == "json" {
        println!("{}", to_json(suite, &lines, &runs, show_text));
    } else {
        print_text(suite, &lines, &runs, show_text);
    }
    if runs.iter().any(|r| !r.errors().is_empty()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("livecheck eval: {problem}\nusage: {USAGE}");
    ExitCode::from(2)
}

fn run(filter: &Filter, lines: &[SuiteLine], version: &str, upstream: Option<&Endpoint>) -> Run {
    let turns = lines
        .iter()
        .map(|l| (l.id.clone(), filter.run(&l.turn, Some(version), upstream)))
        .collect();
    Run {
        version: version.to_owned(),
        turns,
    }
}

/// A turn's outcome in a few words: `withheld by no-iban`.
fn short(h: &Result<Happened, TurnError>) -> String {
    match h {
        Err(_) => "could not run".into(),
        Ok(h) => match (&h.check, h.outcome) {
            (Some(c), _) => format!("{} by {c}", h.outcome.as_str()),
            (None, TurnOutcome::Recovered) => format!("recovered on attempt {}", h.attempt),
            (None, o) => o.as_str().to_owned(),
        },
    }
}

/// The turns whose outcome differs between the runs, in suite order.
fn differing<'a>(lines: &'a [SuiteLine], runs: &[Run]) -> Vec<&'a str> {
    lines
        .iter()
        .map(|l| l.id.as_str())
        .filter(|id| {
            let shorts: Vec<String> = runs
                .iter()
                .map(|r| r.turns.get(*id).map(short).unwrap_or_default())
                .collect();
            shorts.windows(2).any(|w| w.first() != w.get(1))
        })
        .collect()
}

fn percent(t: Option<&Tally>) -> String {
    match t.and_then(|t| t.rate().map(|r| (t, r))) {
        Some((t, r)) => format!("{:>4}/{:<4} {:>5.1}%", t.passed, t.total(), r * 100.0),
        None => format!("{:>16}", "-"),
    }
}

fn print_text(suite: &str, lines: &[SuiteLine], runs: &[Run], show_text: bool) {
    println!(
        "{suite}: {} turn(s), blocking checks with recovery; background checks skipped",
        lines.len()
    );
    let tallies: Vec<BTreeMap<String, Tally>> = runs.iter().map(Run::tallies).collect();
    let mut names: Vec<&String> = tallies.iter().flat_map(|t| t.keys()).collect();
    names.sort();
    names.dedup();
    let width = names.iter().map(|n| n.len()).max().unwrap_or(5).max(5);
    let mut head = format!("{:width$}", "check");
    for r in runs {
        head.push_str(&format!("  {:>16}", format!("version {}", r.version)));
    }
    println!("{head}");
    for name in names {
        let mut row = format!("{name:width$}");
        for t in &tallies {
            row.push_str(&format!("  {}", percent(t.get(name))));
        }
        println!("{row}");
    }
    for r in runs {
        let outcomes: Vec<String> = r
            .outcomes()
            .iter()
            .map(|(o, n)| format!("{o} {n}"))
            .collect();
        println!("version {}: {}", r.version, outcomes.join(", "));
        for (id, e) in r.errors() {
            println!("  {id}: could not run: {e}");
        }
    }
    if runs.len() > 1 {
        let diff = differing(lines, runs);
        println!("outcome differs on {} turn(s)", diff.len());
        for id in diff {
            let parts: Vec<String> = runs
                .iter()
                .map(|r| {
                    format!(
                        "{} {}",
                        r.version,
                        r.turns.get(id).map(short).unwrap_or_default()
                    )
                })
                .collect();
            println!("  {id}: {}", parts.join(" | "));
            if show_text {
                for r in runs {
                    if let Some(Ok(h)) = r.turns.get(id) {
                        println!(
                            "    {}: {}; text {:?}",
                            r.version,
                            describe(h),
                            h.shown.text
                        );
                    }
                }
            }
        }
    }
}

fn to_json(suite: &str, lines: &[SuiteLine], runs: &[Run], show_text: bool) -> Value {
    let versions: Vec<Value> = runs
        .iter()
        .map(|r| {
            let checks: serde_json::Map<String, Value> = r
                .tallies()
                .into_iter()
                .map(|(name, t)| {
                    (name, json!({"passed": t.passed, "failed": t.failed, "errored": t.errored, "pass_rate": t.rate()}))
                })
                .collect();
            let errors: Vec<Value> = r.errors().iter().map(|(id, e)| json!({"id": id, "error": e.to_string()})).collect();
            json!({"version": r.version, "checks": checks, "outcomes": r.outcomes(), "errors": errors})
        })
        .collect();
    let differs: Vec<Value> = if runs.len() > 1 {
        differing(lines, runs)
            .into_iter()
            .map(|id| {
                let per: serde_json::Map<String, Value> = runs
                    .iter()
                    .map(|r| {
                        let h = r.turns.get(id);
                        let mut v = match h {
                            Some(Ok(h)) => json!({"outcome": h.outcome.as_str(), "check": h.check, "attempt": h.attempt}),
                            _ => json!({"outcome": "could_not_run"}),
                        };
                        if let (true, Some(Ok(h)), Some(map)) = (show_text, h, v.as_object_mut()) {
                            map.insert("text".into(), h.shown.text.clone().into());
                        }
                        (r.version.clone(), v)
                    })
                    .collect();
                json!({"id": id, "versions": per})
            })
            .collect()
    } else {
        Vec::new()
    };
    json!({"suite": suite, "turns": lines.len(), "background_checks": "skipped", "versions": versions, "differs": differs})
}
