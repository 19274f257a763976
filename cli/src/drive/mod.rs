//! One turn through the built `livecheck.wasm` in the harness, as Envoy would run it: the request,
//! the upstream's answer (each chunk one body callback), and every callout the filter makes
//! answered as the sidecar would (scripted verdicts and retries, or a live sidecar), then the
//! turn's report read back. What the caller got and what the report says become a [`Happened`].

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use livecheck::config::{Kind, Mode, Policy, Stage, TokenSource, ToolTest, Version};
use livecheck_harness::{compile, Callout, HarnessError, Host, Module, Options, StreamId};
use livecheck_wire::{
    CheckResult, JudgeRequest, Outcome as WireOutcome, ReportBatch, ToolCheckRequest, TurnReport,
    JUDGE_PATH, RESULTS_BATCH_PATH, RESULTS_PATH, RETRY_PATH, TOOL_CHECK_PATH,
};

use crate::caller::{self, Shown};
use crate::cases::{Outcome, Retry, Turn, TurnOutcome, Verdict, Verdicts};
use crate::http::Endpoint;

mod error;

pub use error::{LoadError, TokenError, TurnError};

/// The filter under test: the compiled `.wasm` and the policy it is configured with.
pub struct Filter {
    module: Module,
    policy_bytes: Vec<u8>,
    policy: Policy,
    /// The VM's environment (Envoy's `vm_config.environment_variables`): the policy's
    /// `judge_token_env`, if it names one.
    environment: BTreeMap<String, String>,
    /// The `.wasm`'s file, its SHA-256 and the banner it logs on start.
    pub wasm: WasmInfo,
    judge: Option<Endpoint>,
}

/// The token a `judge_token_env` variable holds in the VM when the CLI's own environment does not
/// set it and every verdict is scripted: no callout leaves the harness, so no real token is needed.
const SCRIPTED_TOKEN: &str = "livecheck-test-scripted-judges";

/// The VM environment a policy needs: the variable its `judge_token_env` names, from the CLI's
/// own environment (as Envoy's `host_env_keys` reads Envoy's), else, with scripted verdicts only,
/// [`SCRIPTED_TOKEN`]. With `--judge` the live sidecar checks the token, so it must be set.
fn vm_environment(
    policy: &mut Policy,
    live_judge: bool,
    env: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, TokenError> {
    let Some(TokenSource::Env(name)) = policy.judge_token.clone() else {
        return Ok(BTreeMap::new());
    };
    let value = match env(&name) {
        Some(value) => value,
        None if !live_judge => SCRIPTED_TOKEN.to_owned(),
        None => return Err(TokenError::Unset(name)),
    };
    // What the filter will do with it, said here with the reason (the filter itself only logs it).
    policy
        .resolve_token(|n| (n == name).then(|| value.clone()))
        .map_err(|e| TokenError::Refused(Box::new(e)))?;
    Ok(BTreeMap::from([(name, value)]))
}

/// Which `.wasm` ran, so a report says exactly what was tested.
pub struct WasmInfo {
    /// The path given.
    pub path: String,
    /// SHA-256 of its bytes, hex.
    pub sha256: String,
    /// What the filter logs on start (`livecheck <version> (git <commit>)`).
    pub banner: String,
}

/// What happened to one turn.
#[derive(Debug, Clone)]
pub struct Happened {
    /// How it ended for the caller.
    pub outcome: TurnOutcome,
    /// The blocking check that stopped it (refused, withheld, cut).
    pub check: Option<String>,
    /// The `X-Core-Check` code, when the caller got one.
    pub code: Option<String>,
    /// The caller's HTTP status.
    pub status: Option<u16>,
    /// The answer the caller got.
    pub shown: Shown,
    /// The answer the caller got is this attempt (1: the first).
    pub attempt: u32,
    /// Rows that denied a tool call.
    pub denied: Vec<String>,
    /// Every blocking result of the turn's report, in order.
    pub results: Vec<CheckResult>,
}

impl Happened {
    /// A check's result on the last answer it read.
    pub fn result_of(&self, check: &str) -> Option<Outcome> {
        self.results
            .iter()
            .rev()
            .find(|r| r.name == check)
            .map(|r| outcome(r.outcome))
    }
}

fn outcome(o: WireOutcome) -> Outcome {
    match o {
        WireOutcome::Passed => Outcome::Passed,
        WireOutcome::Failed => Outcome::Failed,
        WireOutcome::Errored => Outcome::Errored,
    }
}

/// How often the outbox's tick may run before a turn's report is given up on.
const REPORT_TICKS: usize = 20;
/// Callout rounds one turn may take (each round answers what is pending).
const MAX_ROUNDS: usize = 1000;

impl Filter {
    /// Compiles `wasm` and checks `policy` loads into it.
    pub fn load(wasm: &Path, policy: &Path, judge: Option<&str>) -> Result<Self, LoadError> {
        let in_wasm = || wasm.display().to_string();
        let in_policy = || policy.display().to_string();
        let bytes = std::fs::read(wasm).map_err(|error| LoadError::Read {
            path: in_wasm(),
            error,
        })?;
        let policy_bytes = std::fs::read(policy).map_err(|error| LoadError::Read {
            path: in_policy(),
            error,
        })?;
        let mut compiled =
            Policy::from_json(&policy_bytes).map_err(|errors| LoadError::Policy {
                path: in_policy(),
                errors,
            })?;
        let module = compile(&bytes).map_err(|error| LoadError::Compile {
            path: in_wasm(),
            error,
        })?;
        let judge = judge
            .map(Endpoint::parse)
            .transpose()
            .map_err(LoadError::Judge)?;
        let environment = vm_environment(&mut compiled, judge.is_some(), |n| std::env::var(n).ok())
            .map_err(|error| LoadError::Token {
                path: in_policy(),
                error,
            })?;
        let mut filter = Self {
            module,
            policy_bytes,
            policy: compiled,
            environment,
            wasm: WasmInfo {
                path: wasm.display().to_string(),
                sha256: sha256_hex(&bytes),
                banner: String::new(),
            },
            judge,
        };
        let host = filter.host().map_err(|error| LoadError::Start {
            path: in_policy(),
            error,
        })?;
        filter.wasm.banner = host
            .logs()
            .iter()
            .map(|l| l.message.as_str())
            .find(|m| m.starts_with("livecheck "))
            .unwrap_or("(no start banner: not a livecheck build?)")
            .to_owned();
        Ok(filter)
    }

    /// A fresh host (one Envoy worker) running the policy.
    fn host(&self) -> Result<Host, TurnError> {
        let host = Host::from_module(
            &self.module,
            Options {
                plugin_config: self.policy_bytes.clone(),
                // The Envoy a policy holding answer headers is made for sets the flag that lets it.
                allow_on_headers_stop_iteration: self.policy.hold_answer_headers,
                clusters: vec![self.policy.judge_cluster.clone()],
                environment: self.environment.clone(),
                ..Options::default()
            },
        );
        match host {
            Ok(h) => Ok(h),
            Err(HarnessError::ConfigRejected) => Err(TurnError::Refused),
            Err(e) => Err(TurnError::Harness(e)),
        }
    }

    /// The version a turn runs (as the filter selects it).
    fn version_of(&self, turn: &Turn, version: Option<&str>) -> Result<Rc<Version>, TurnError> {
        self.policy
            .select(
                turn.agent.as_deref(),
                version.or(turn.version.as_deref()),
                turn.headers.get("host").map(String::as_str),
            )
            .map_err(TurnError::NoVersion)
    }

    /// Runs one turn. `version` overrides the turn's; `upstream` answers turns without a
    /// recorded answer. An `Err` is a turn that cannot run as written (a callout nothing answers).
    pub fn run(
        &self,
        turn: &Turn,
        version: Option<&str>,
        upstream: Option<&Endpoint>,
    ) -> Result<Happened, TurnError> {
        let selected = self.version_of(turn, version)?;
        let mut host = self.host()?;
        let mut script = Script::new(turn, &selected, self.judge.as_ref());
        let s = host.new_stream();
        let path = turn.path.clone().unwrap_or_else(|| {
            let streamed = turn.answer.as_ref().is_some_and(|a| a.events.is_some());
            turn.api.path(streamed).to_owned()
        });
        let mut headers: Vec<(String, String)> = vec![
            (":method".into(), "POST".into()),
            (":path".into(), path.clone()),
            (
                ":authority".into(),
                turn.headers
                    .get("host")
                    .cloned()
                    .unwrap_or_else(|| "api.test".into()),
            ),
            ("content-type".into(), "application/json".into()),
        ];
        if turn.api == crate::cases::Api::Mcp && !turn.headers.contains_key("accept") {
            // What the MCP SDKs' Streamable HTTP clients send with every POST.
            headers.push((
                "accept".into(),
                "application/json, text/event-stream".into(),
            ));
        }
        if let Some(agent) = &turn.agent {
            headers.push((self.policy.agent_header.clone(), agent.clone()));
        }
        if let Some(v) = version.or(turn.version.as_deref()) {
            headers.push((self.policy.version_header.clone(), v.to_owned()));
        }
        headers.extend(
            turn.headers
                .iter()
                .filter(|(k, _)| k.as_str() != "host")
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        let harness = TurnError::Harness;
        host.send_request_headers(s, &headers, false)
            .map_err(harness)?;
        host.send_request_body(s, &turn.request.bytes(), false)
            .map_err(harness)?;
        host.send_request_body(s, b"", true).map_err(harness)?;
        script.pump(&mut host)?;
        if host.upstream_received(s).end_of_stream {
            let answer = match (&turn.answer, upstream) {
                (Some(a), _) => Some(recorded(a, turn.api)),
                (None, Some(up)) => Some(ask_upstream(&host, s, &path, up)?),
                (None, None) => None,
            };
            if let Some((headers, chunks)) = answer {
                send_answer(&mut host, s, &headers, &chunks, &mut script)?;
            }
        }
        host.finish_stream(s).map_err(harness)?;
        let tick = host.tick_period().unwrap_or(Duration::from_millis(200));
        for _ in 0..REPORT_TICKS {
            if script.report.is_some() {
                break;
            }
            host.advance_time(tick);
            script.pump(&mut host)?;
        }
        if host.vm_failed() {
            return Err(TurnError::VmFailed);
        }
        let report = match script.report.take() {
            Some(report) => report,
            // An MCP message that is not a `tools/call` (initialize, tools/list, …), or a call
            // to a version without tool checks, passes unchecked: the filter records nothing.
            None if turn.api == crate::cases::Api::Mcp => TurnReport {
                turn_id: String::new(),
                response_id: None,
                agent: String::new(),
                version: selected.id.clone(),
                person: None,
                results: Vec::new(),
                background: Vec::new(),
            },
            None => return Err(TurnError::NoReport),
        };
        Ok(classify(&host, s, turn, &selected, report))
    }
}

/// Response headers and body chunks.
type Answer = (Vec<(String, String)>, Vec<Vec<u8>>);

fn recorded(a: &crate::cases::Answer, api: crate::cases::Api) -> Answer {
    let streamed = a.events.is_some();
    let mut headers = vec![(":status".to_owned(), a.status.unwrap_or(200).to_string())];
    if !a
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("content-type"))
    {
        let ct = if streamed {
            api.stream_content_type()
        } else {
            "application/json"
        };
        headers.push(("content-type".into(), ct.into()));
    }
    headers.extend(a.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    let chunks = match (&a.events, &a.body) {
        (Some(events), _) => events.iter().map(|e| e.bytes(api)).collect(),
        (None, Some(body)) => vec![body.bytes()],
        (None, None) => Vec::new(),
    };
    (headers, chunks)
}

/// Asks a real upstream with what the filter let through, and splits a streamed answer into one
/// chunk per SSE event.
fn ask_upstream(host: &Host, s: StreamId, path: &str, up: &Endpoint) -> Result<Answer, TurnError> {
    let sent = host.upstream_received(s);
    let headers = sent.headers.clone().unwrap_or_default();
    let r = up.post(path, &headers, &sent.body)?;
    let mut out = vec![(":status".to_owned(), r.status.to_string())];
    out.extend(
        r.headers
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "transfer-encoding" | "connection" | "content-length"
                )
            })
            .cloned(),
    );
    // Server-sent events go one event per callback; another body (JSON, or Bedrock's event
    // stream) as one.
    let sse = r
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let chunks = if sse {
        split_events(&r.body)
    } else {
        vec![r.body]
    };
    Ok((out, chunks))
}

fn split_events(body: &[u8]) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < body.len() {
        if body.get(i..i + 2) == Some(b"\n\n") {
            chunks.push(body.get(start..i + 2).unwrap_or_default().to_vec());
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < body.len() {
        chunks.push(body.get(start..).unwrap_or_default().to_vec());
    }
    chunks
}

fn send_answer(
    host: &mut Host,
    s: StreamId,
    headers: &[(String, String)],
    chunks: &[Vec<u8>],
    script: &mut Script,
) -> Result<(), TurnError> {
    let harness = TurnError::Harness;
    host.send_response_headers(s, headers, false)
        .map_err(harness)?;
    script.pump(host)?;
    for chunk in chunks {
        host.send_response_body(s, chunk, false).map_err(harness)?;
        script.pump(host)?;
    }
    // Envoy delivers the end of a chunked body as its own empty callback.
    host.send_response_body(s, b"", true).map_err(harness)?;
    script.pump(host)
}

/// Answers the filter's callouts as the sidecar would, from the turn's script or a live sidecar.
struct Script<'a> {
    turn: &'a Turn,
    version: &'a Version,
    judge: Option<&'a Endpoint>,
    asked: BTreeMap<String, usize>,
    report: Option<TurnReport>,
}

impl<'a> Script<'a> {
    fn new(turn: &'a Turn, version: &'a Version, judge: Option<&'a Endpoint>) -> Self {
        Self {
            turn,
            version,
            judge,
            asked: BTreeMap::new(),
            report: None,
        }
    }

    /// Answers every callout in flight, and those their answers lead to.
    fn pump(&mut self, host: &mut Host) -> Result<(), TurnError> {
        for _ in 0..MAX_ROUNDS {
            let pending = host.pending_callouts();
            if pending.is_empty() {
                return Ok(());
            }
            for c in pending {
                self.answer(host, &c)?;
            }
        }
        Err(TurnError::EndlessCallouts)
    }

    fn answer(&mut self, host: &mut Host, c: &Callout) -> Result<(), TurnError> {
        let path = c.header(":path").unwrap_or_default().to_owned();
        let scripted = match path.as_str() {
            RESULTS_PATH | RESULTS_BATCH_PATH => {
                self.take_report(&path, &c.body)?;
                Some(reply(200, "{}"))
            }
            JUDGE_PATH => self.judge_verdict(&c.body)?,
            TOOL_CHECK_PATH => self.tool_verdict(&c.body)?,
            RETRY_PATH => self.retry(&c.body)?,
            other => return Err(TurnError::UnservedPath(other.to_owned())),
        };
        let (status, body) = match scripted {
            Some(answer) => answer,
            None => match self.judge {
                Some(live) => match live.post(&path, &c.headers, &c.body) {
                    Ok(r) => (r.status, r.body),
                    Err(_) => {
                        // A sidecar that cannot be reached: Envoy resets the callout.
                        return host.fail_callout(c.token).map_err(TurnError::Harness);
                    }
                },
                None => return Err(self.unscripted(&path, &c.body)),
            },
        };
        let status = status.to_string();
        host.answer_callout(
            c.token,
            &[
                (":status", status.as_str()),
                ("content-type", "application/json"),
            ],
            &body,
        )
        .map_err(TurnError::Harness)
    }

    fn take_report(&mut self, path: &str, body: &[u8]) -> Result<(), TurnError> {
        let mut reports = if path == RESULTS_BATCH_PATH {
            serde_json::from_slice::<ReportBatch>(body)
                .map_err(unparsable("a report batch"))?
                .reports
        } else {
            vec![serde_json::from_slice::<TurnReport>(body).map_err(unparsable("a report"))?]
        };
        if self.report.is_none() && !reports.is_empty() {
            self.report = Some(reports.remove(0));
        }
        Ok(())
    }

    /// The judged checks this request could be for (the filter sends no check name).
    fn judged_checks(&self, req: &JudgeRequest) -> Vec<&'a str> {
        let stage = match req.stage {
            livecheck_wire::Stage::Input => Stage::Input,
            livecheck_wire::Stage::Output => Stage::Output,
        };
        self.version
            .checks
            .iter()
            .filter(|c| !c.kind.is_rule() && c.mode == Mode::Block && c.stage == stage)
            .filter(|c| c.kind.as_str() == req.kind)
            .filter(|c| {
                let rule = match &c.kind {
                    Kind::CustomRule { rule } => Some(rule),
                    _ => c.description.as_ref(),
                };
                rule == req.rule.as_ref()
            })
            .filter(|c| c.judge_model.as_ref().is_none_or(|m| *m == req.judge_model))
            .map(|c| c.name.as_str())
            .collect()
    }

    fn judge_verdict(&mut self, body: &[u8]) -> Result<Option<(u16, Vec<u8>)>, TurnError> {
        let req: JudgeRequest =
            serde_json::from_slice(body).map_err(unparsable("a judge request"))?;
        let names = self.judged_checks(&req);
        self.scripted(&names, |t| &t.judge, "check")
    }

    fn tool_verdict(&mut self, body: &[u8]) -> Result<Option<(u16, Vec<u8>)>, TurnError> {
        let req: ToolCheckRequest =
            serde_json::from_slice(body).map_err(unparsable("a tool check"))?;
        let names: Vec<&'a str> = self
            .version
            .tools
            .rows
            .iter()
            .filter(|r| matches!(&r.test, ToolTest::When(c) if *c == req.condition))
            .filter(|r| r.tool.matches(&req.tool))
            .map(|r| r.name.as_str())
            .collect();
        self.scripted(&names, |t| &t.tools, "row")
    }

    /// The scripted verdict for the one of `names` the turn scripts; `None` when it scripts none.
    fn scripted(
        &mut self,
        names: &[&str],
        table: fn(&Turn) -> &BTreeMap<String, Verdicts>,
        what: &'static str,
    ) -> Result<Option<(u16, Vec<u8>)>, TurnError> {
        let table = table(self.turn);
        let named: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| table.contains_key(*n))
            .collect();
        let name = match named.as_slice() {
            [] => return Ok(None),
            [one] => *one,
            [_, ..] => {
                return Err(TurnError::SameQuestion {
                    what,
                    named: named.iter().map(|n| (*n).to_owned()).collect(),
                })
            }
        };
        let n = self.asked.entry(format!("{what}:{name}")).or_insert(0);
        let verdict =
            table
                .get(name)
                .and_then(|v| v.nth(*n))
                .ok_or_else(|| TurnError::TooFewVerdicts {
                    what,
                    name: name.to_owned(),
                    asked: *n + 1,
                })?;
        *n += 1;
        Ok(Some(verdict_answer(verdict)))
    }

    fn retry(&mut self, body: &[u8]) -> Result<Option<(u16, Vec<u8>)>, TurnError> {
        let req: livecheck_wire::RetryRequest =
            serde_json::from_slice(body).map_err(unparsable("a retry"))?;
        let index = usize::try_from(req.attempt.saturating_sub(2)).unwrap_or(usize::MAX);
        let answer = match self.turn.retries.get(index) {
            Some(Retry::Answered(body)) => serde_json::json!({
                "outcome": "answered",
                "body": String::from_utf8_lossy(&body.bytes()),
            }),
            Some(Retry::Errored(_)) => serde_json::json!({
                "outcome": "errored", "reason": "scripted by the case",
            }),
            None => return Ok(None),
        };
        Ok(Some((200, answer.to_string().into_bytes())))
    }

    fn unscripted(&self, path: &str, body: &[u8]) -> TurnError {
        match path {
            JUDGE_PATH => {
                let names = serde_json::from_slice::<JudgeRequest>(body)
                    .map(|r| self.judged_checks(&r).join(" or "))
                    .unwrap_or_default();
                TurnError::UnscriptedCheck(names)
            }
            TOOL_CHECK_PATH => TurnError::UnscriptedTool,
            RETRY_PATH => {
                let attempt = serde_json::from_slice::<livecheck_wire::RetryRequest>(body)
                    .map(|r| r.attempt)
                    .unwrap_or(0);
                TurnError::UnscriptedRetry(attempt)
            }
            _ => TurnError::Unanswered(path.to_owned()),
        }
    }
}

/// A callout body that does not parse, as the turn's error.
fn unparsable(what: &'static str) -> impl Fn(serde_json::Error) -> TurnError {
    move |error| TurnError::Unparsable { what, error }
}

fn reply(status: u16, body: &str) -> (u16, Vec<u8>) {
    (status, body.as_bytes().to_vec())
}

fn verdict_answer(v: &Verdict) -> (u16, Vec<u8>) {
    let (outcome, score, reason) = match v {
        Verdict::Status { status } => return (*status, Vec::new()),
        Verdict::Outcome(o) => (*o, None, None),
        Verdict::Full {
            outcome,
            score,
            reason,
        } => (*outcome, *score, reason.clone()),
    };
    let score = score.or(match outcome {
        Outcome::Passed => Some(1.0),
        Outcome::Failed => Some(0.0),
        Outcome::Errored => None,
    });
    let mut body = serde_json::json!({
        "outcome": outcome.as_str(),
        "reason": reason.unwrap_or_else(|| "scripted by the case".into()),
        "usage": {"input_tokens": 0, "output_tokens": 0},
    });
    if let (Some(score), Some(map)) = (score, body.as_object_mut()) {
        map.insert("score".into(), score.into());
    }
    (200, body.to_string().into_bytes())
}

/// Reads what the caller got and what the report says into one outcome.
fn classify(
    host: &Host,
    s: StreamId,
    turn: &Turn,
    version: &Version,
    report: TurnReport,
) -> Happened {
    let caller = host.caller_received(s);
    let header = caller.header("x-core-check").map(str::to_owned);
    let shown = caller::read(turn.api, &caller.body);
    let asked_model = host.upstream_received(s).end_of_stream;
    let results: Vec<CheckResult> = report
        .results
        .into_iter()
        .filter(|r| r.mode == livecheck_wire::Mode::Block)
        .collect();
    let stops = |r: &&CheckResult| {
        r.outcome == WireOutcome::Failed
            || (r.outcome == WireOutcome::Errored && !r.passed_on_error)
    };
    let last = results.iter().map(|r| r.attempt).max().unwrap_or(1);
    let first_stop = results.iter().find(stops).map(|r| r.name.clone());
    let last_stopped = results
        .iter()
        .filter(|r| r.attempt == last)
        .any(|r| stops(&r));
    let denied = results
        .iter()
        .filter(|r| r.tool.is_some() && r.outcome != WireOutcome::Passed)
        .map(|r| r.name.clone())
        .collect();
    let (outcome, check) = if !asked_model {
        let named = header.as_deref().and_then(|h| field(h, "check"));
        (TurnOutcome::Refused, named.or(first_stop))
    } else if last_stopped {
        let cut = shown.streamed && shown.text != version.blocked_reply;
        let outcome = if cut {
            TurnOutcome::Cut
        } else {
            TurnOutcome::Withheld
        };
        (outcome, first_stop)
    } else if last > 1 {
        (TurnOutcome::Recovered, None)
    } else {
        (TurnOutcome::Passed, None)
    };
    Happened {
        outcome,
        check,
        code: header.as_deref().and_then(|h| field(h, "code")),
        status: caller.status(),
        shown,
        attempt: last,
        denied,
        results,
    }
}

/// A member of the `X-Core-Check` dictionary, its string unquoted.
fn field(header: &str, key: &str) -> Option<String> {
    header.split(',').find_map(|member| {
        let (k, v) = member.trim().split_once('=')?;
        (k == key).then(|| {
            v.trim_matches('"')
                .replace("\\\"", "\"")
                .replace("\\\\", "\\")
        })
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
