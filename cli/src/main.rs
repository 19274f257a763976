//! `livecheck lint CONFIG`: checks a plugin configuration offline, with the same errors the filter
//! logs when Envoy loads it, so operators can check configs in their own CI. `livecheck schema`:
//! prints the configuration's JSON Schema, for editors (`schema/livecheck-config.schema.json`);
//! `livecheck schema cases` the one of `livecheck test`'s case files. `livecheck test` runs cases
//! through the built `livecheck.wasm` (`test_cmd`), `livecheck eval` a suite through two versions
//! (`eval`); both in the wasmtime harness, so native builds only.

#[cfg(not(target_family = "wasm"))]
mod args;
#[cfg(not(target_family = "wasm"))]
mod caller;
#[cfg(not(target_family = "wasm"))]
mod cases;
#[cfg(not(target_family = "wasm"))]
mod drive;
#[cfg(not(target_family = "wasm"))]
mod eval;
#[cfg(not(target_family = "wasm"))]
mod expect;
#[cfg(not(target_family = "wasm"))]
mod http;
#[cfg(not(target_family = "wasm"))]
mod junit;
#[cfg(not(target_family = "wasm"))]
mod test_cmd;

use std::io::Read;
use std::process::ExitCode;

use livecheck::config::Policy;

const USAGE: &str = "usage: livecheck lint CONFIG.json   (- reads standard input)
       livecheck schema [cases]     (the configuration's JSON Schema, or the case files')
       livecheck test POLICY.json CASES... --wasm livecheck.wasm [--judge URL] [--format text|junit]
       livecheck eval POLICY.json --version V [--against V2] SUITE.jsonl --wasm livecheck.wasm
                      [--upstream URL] [--judge URL] [--show-text] [--format text|json]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") || args.first().is_some_and(|a| a == "help")
    {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    #[cfg(not(target_family = "wasm"))]
    match args.first().map(String::as_str) {
        Some("test") => return test_cmd::main(args.get(1..).unwrap_or_default()),
        Some("eval") => return eval::main(args.get(1..).unwrap_or_default()),
        _ => {}
    }
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["lint", path] => lint(path),
        ["schema"] => print_schema(livecheck::config::json_schema()),
        #[cfg(not(target_family = "wasm"))]
        ["schema", "cases"] => print_schema(livecheck::config::schema_for::<cases::CaseFile>()),
        ["--version"] => {
            println!("{}", livecheck::build_info::banner());
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn print_schema(schema: schemars::Schema) -> ExitCode {
    match serde_json::to_string_pretty(&schema) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("livecheck schema: {e}");
            ExitCode::FAILURE
        }
    }
}

fn lint(path: &str) -> ExitCode {
    let bytes = if path == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map(|_| buf)
    } else {
        std::fs::read(path)
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(e) => {
            eprintln!("livecheck lint: cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    match Policy::from_json(&bytes) {
        Ok(policy) => {
            let versions: usize = policy.agents.values().map(|a| a.versions.len()).sum();
            let checks: usize = policy
                .agents
                .values()
                .flat_map(|a| a.versions.values())
                .map(|v| v.checks.len())
                .sum();
            let tool_checks: usize = policy
                .agents
                .values()
                .flat_map(|a| a.versions.values())
                .map(|v| v.tools.rows.len())
                .sum();
            if let Some(warning) = policy.unread.warning() {
                println!("{path}: warning: {warning}");
            }
            let tools = if tool_checks > 0 {
                format!(", {tool_checks} tool check(s)")
            } else {
                String::new()
            };
            println!(
                "{path}: ok ({} agent(s), {versions} version(s), {checks} check(s){tools})",
                policy.agents.len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                println!("{path}: {e}");
            }
            eprintln!("{path}: {} problem(s)", errors.len());
            ExitCode::FAILURE
        }
    }
}
