//! `livecheck test POLICY CASES... --wasm FILE [--judge URL] [--format text|junit]`: runs each
//! case through the given `livecheck.wasm` in the harness, configured with POLICY, and reports per
//! case. Exit 0 when every case passed, 1 when any failed or could not run, 2 for bad arguments,
//! a policy the filter refuses or a `.wasm` that does not load.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use crate::args::Args;
use crate::cases::read_case_file;
use crate::drive::Filter;
use crate::expect::{describe, unmet};
use crate::junit::{self, CaseResult, CaseVerdict, FileResult};

pub const USAGE: &str =
    "livecheck test POLICY.json CASES.yaml... --wasm livecheck.wasm [--judge URL] [--format text|junit]";

/// Runs the command.
pub fn main(args: &[String]) -> ExitCode {
    let args = match Args::parse(args, &["--wasm", "--judge", "--format"], &[]) {
        Ok(a) => a,
        Err(e) => return usage(&e.to_string()),
    };
    let format = args.value("--format").unwrap_or_else(|| "text".into());
    if !matches!(format.as_str(), "text" | "junit") {
        return usage(&format!("--format is text or junit, not {format}"));
    }
    let Some(wasm) = args.value("--wasm") else {
        return usage("--wasm names the livecheck.wasm to test (the file Envoy loads)");
    };
    let [policy, cases @ ..] = args.positional.as_slice() else {
        return usage("no policy given");
    };
    if cases.is_empty() {
        return usage("no case file given");
    }
    let filter = match Filter::load(
        Path::new(&wasm),
        Path::new(policy),
        args.value("--judge").as_deref(),
    ) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("livecheck test: {e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let files: Vec<FileResult> = cases.iter().map(|f| run_file(&filter, f)).collect();
    let wasm_line = format!(
        "{} ({}, sha256 {})",
        filter.wasm.path, filter.wasm.banner, filter.wasm.sha256
    );
    if format == "junit" {
        print!("{}", junit::write(&files, &wasm_line));
    } else {
        print_text(&files, &wasm_line, started.elapsed().as_secs_f64());
    }
    let all_passed = files.iter().all(|f| {
        f.error.is_none()
            && f.cases
                .iter()
                .all(|c| matches!(c.verdict, CaseVerdict::Passed))
    });
    if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("livecheck test: {problem}\nusage: {USAGE}");
    ExitCode::from(2)
}

fn run_file(filter: &Filter, file: &str) -> FileResult {
    let parsed = match read_case_file(Path::new(file)) {
        Ok(p) => p,
        Err(e) => {
            return FileResult {
                file: file.to_owned(),
                cases: Vec::new(),
                error: Some(e),
            }
        }
    };
    let cases = parsed
        .cases
        .iter()
        .map(|case| {
            let started = Instant::now();
            let verdict = match filter.run(&case.turn, None, None) {
                Err(e) => CaseVerdict::Error(e),
                Ok(happened) => {
                    let unmet = unmet(&case.expect, &happened);
                    if unmet.is_empty() {
                        CaseVerdict::Passed
                    } else {
                        CaseVerdict::Failed(unmet, describe(&happened))
                    }
                }
            };
            CaseResult {
                name: case.name.clone(),
                seconds: started.elapsed().as_secs_f64(),
                verdict,
            }
        })
        .collect();
    FileResult {
        file: file.to_owned(),
        cases,
        error: None,
    }
}

fn print_text(files: &[FileResult], wasm: &str, seconds: f64) {
    let (mut passed, mut failed, mut errors) = (0, 0, 0);
    for f in files {
        println!("{}", f.file);
        if let Some(e) = &f.error {
            errors += 1;
            println!("  ERROR  the case file: {e}");
        }
        for c in &f.cases {
            match &c.verdict {
                CaseVerdict::Passed => {
                    passed += 1;
                    println!("  ok     {}", c.name);
                }
                CaseVerdict::Failed(unmet, happened) => {
                    failed += 1;
                    println!("  FAIL   {}", c.name);
                    for u in unmet {
                        println!("         {u}");
                    }
                    println!("         happened: the turn {happened}");
                }
                CaseVerdict::Error(e) => {
                    errors += 1;
                    println!("  ERROR  {}", c.name);
                    println!("         {e}");
                }
            }
        }
    }
    println!(
        "{} case(s): {passed} passed, {failed} failed, {errors} could not run, in {seconds:.2} s\nwasm: {wasm}",
        passed + failed + errors
    );
}
