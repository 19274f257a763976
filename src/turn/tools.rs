//! Tool-call checks of a held non-streamed answer: its calls checked (the filter's tests, then
//! the judge), the answer passed when every call may go, else replaced by the vendor's refusal
//! saying why, with `code=tool_call_denied`.

use crate::api::ToolCall;
use crate::record::tools_decided;
use crate::tools::{self, Checking, Denial, Next};

use super::*;

/// A held non-streamed answer whose tool calls are being checked.
pub(super) struct CallCheck {
    asked: Asked,
    checking: Checking,
    /// The answer as the upstream wrote it, for the refusal that keeps its id, model and usage.
    body: Vec<u8>,
}

impl Turn {
    /// Starts checking a held answer's `calls`. `Continue` when they may all go at once. The
    /// answer is kept only while a judge is asked (decided at once, it is read where it lies).
    pub(super) fn check_calls(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        calls: Vec<ToolCall>,
        body: &[u8],
    ) -> Flow {
        let cx = tools_context(&self.policy, &asked, 1);
        let mut checking = Checking::start(host, &cx, calls, 0);
        tools_decided(
            host,
            &mut self.record,
            &asked.version.tools,
            &checking.take_results(),
        );
        match checking.next() {
            Next::Waiting => {
                self.state = State::CheckingCalls(Box::new(CallCheck {
                    asked,
                    checking,
                    body: body.to_vec(),
                }));
                Flow::Pause
            }
            Next::Allowed => self.calls_decided(host, asked, None, body, false),
            Next::Denied(denial) => self.calls_decided(host, asked, Some(denial), body, false),
        }
    }

    /// A verdict on a call came back (the turn's state, taken); `false` when the callout is not
    /// this turn's.
    pub(super) fn call_verdict(
        &mut self,
        host: &mut dyn Host,
        mut check: Box<CallCheck>,
        token: u32,
        body_size: usize,
    ) -> bool {
        if !check.checking.waits_for(token) {
            self.state = State::CheckingCalls(check);
            return false;
        }
        let version = Rc::clone(&check.asked.version);
        check.checking.answered(host, &version, token, body_size);
        tools_decided(
            host,
            &mut self.record,
            &version.tools,
            &check.checking.take_results(),
        );
        let denial = match check.checking.next() {
            Next::Waiting => {
                self.state = State::CheckingCalls(check);
                return true;
            }
            Next::Allowed => None,
            Next::Denied(denial) => Some(denial),
        };
        let CallCheck { asked, body, .. } = *check;
        let _ = self.calls_decided(host, asked, denial, &body, true);
        true
    }

    /// Every call decided: the held answer passes, or is denied with `denial`'s reason. `resumed`:
    /// called from a callout's answer, so the held answer goes on through the host.
    fn calls_decided(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        denial: Option<Denial>,
        body: &[u8],
        resumed: bool,
    ) -> Flow {
        self.state = State::Done;
        let Some(denial) = denial else {
            self.pass_held(host);
            return resume(host, Stage::Output, resumed);
        };
        let reply = denied_reply(host, &asked, &denial, body);
        let stop = denied_stop(&denial);
        if denial.recover {
            // Asked again, told of the denial, with its tools; the reply above is what the
            // caller gets if no retry passes.
            let rules = vec![denial.as_rule()];
            return self
                .recover(host, asked, stop, rules, reply, true, resumed)
                .unwrap_or(Flow::Pause);
        }
        self.answer_instead(host, Some(&stop), reply.content_type, &reply.body, resumed)
    }
}

/// A streamed answer's tool calls with their checks, a batch per step that completed calls.
///
/// The stream is not paused while the upstream still sends: text before a call has gone out, and
/// the call's events (and what follows them) wait in the rewriter; a verdict is applied at the
/// next upstream chunk. Only the upstream's end is held (paused) until every batch is decided;
/// then verdicts are applied as they come.
pub(super) struct StreamCalls {
    /// Each batch: the calls' keys in the rewriter, and their checks.
    batches: Vec<(Vec<u64>, Checking)>,
    /// Calls allowed: they go once the answer ended and no call of it was denied (one denied call
    /// denies the answer, so no call goes before every call is decided).
    allowed: Vec<u64>,
    /// How many calls of the answer were checked so far (results number them across batches).
    counted: usize,
    /// Paused at the upstream's end: what this filter left in the paused buffer.
    kept: Option<Vec<u8>>,
}

impl StreamCalls {
    /// Whether anything of it still waits: a batch's verdicts, or allowed calls for the end.
    fn holds(&self) -> bool {
        !self.batches.is_empty() || !self.allowed.is_empty()
    }

    /// What this filter left in the paused buffer (nothing unless paused).
    pub(super) fn kept_len(&self) -> usize {
        self.kept.as_ref().map_or(0, Vec::len)
    }
}

/// After a streamed step: the calls it completed are checked, and what the checks decided so far
/// is applied to `out`, what the step sends.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_stream_calls(
    cx: &mut Ctx<'_>,
    s: &mut Streamed,
    calls: Vec<(u64, ToolCall)>,
    out: &mut Vec<u8>,
    end_of_stream: bool,
    (body_size, buffered): (usize, &[u8]),
) -> Flow {
    if s.was_cut() {
        // Cut by a rule meanwhile: nothing after the cut is sent, so no call waits any more.
        if let Some(c) = s.calls.as_mut() {
            c.batches.clear();
            c.allowed.clear();
        }
    } else if !calls.is_empty() {
        let tools_cx = tools_context(cx.policy, &s.asked, 1);
        let (keys, calls): (Vec<u64>, Vec<ToolCall>) = calls.into_iter().unzip();
        let state = s.calls.get_or_insert_with(|| StreamCalls {
            batches: Vec::new(),
            allowed: Vec::new(),
            counted: 0,
            kept: None,
        });
        let first = state.counted;
        state.counted = state.counted.saturating_add(calls.len());
        let checking = Checking::start(cx.host, &tools_cx, calls, first);
        state.batches.push((keys, checking));
    }
    let waiting = settle_stream_calls(cx, s, out, end_of_stream);
    let mut all = s
        .calls
        .as_mut()
        .and_then(|c| c.kept.take())
        .unwrap_or_default();
    all.append(out);
    cx.replace_changed(body_size, buffered, &all);
    match s.calls.as_mut() {
        Some(calls) if waiting && (end_of_stream || s.upstream_ended) => {
            // The upstream's end waits for the verdicts.
            calls.kept = Some(all);
            Flow::Pause
        }
        _ => {
            if !s.calls.as_ref().is_some_and(StreamCalls::holds) {
                s.calls = None;
            }
            Flow::Continue
        }
    }
}

/// Applies what the checks decided: allowed batches' calls go, a denied call ends the stream with
/// the reason. Returns whether a batch still waits.
fn settle_stream_calls(
    cx: &mut Ctx<'_>,
    s: &mut Streamed,
    out: &mut Vec<u8>,
    end_of_stream: bool,
) -> bool {
    let Some(calls) = s.calls.as_mut() else {
        return false;
    };
    let mut denied = None;
    let mut i = 0;
    while let Some((_, checking)) = calls.batches.get_mut(i) {
        tools_decided(
            cx.host,
            cx.record,
            &s.asked.version.tools,
            &checking.take_results(),
        );
        match checking.next() {
            Next::Waiting => i += 1,
            Next::Allowed => {
                let (keys, _) = calls.batches.remove(i);
                calls.allowed.extend(keys);
            }
            Next::Denied(denial) => {
                denied = Some(denial);
                break;
            }
        }
    }
    let upstream_done = s.upstream_ended || end_of_stream;
    let Some(denial) = denied else {
        if calls.batches.is_empty() && upstream_done {
            // Every call of the answer is decided and none was denied: they all go now.
            let allowed = std::mem::take(&mut calls.allowed);
            out.append(&mut s.rewriter.allow_calls(&allowed));
        }
        return !calls.batches.is_empty();
    };
    // Verdicts still out are not waited for: their results are never recorded.
    calls.batches.clear();
    calls.allowed.clear();
    out.append(&mut s.rewriter.deny_calls(&denial.reason));
    let was_ended = s.ended();
    s.end(true);
    if !was_ended || !upstream_done {
        s.set_close_pending(!upstream_done);
        if !upstream_done {
            // The rest of the upstream's answer is dropped: the next chunk closes the stream,
            // or the timer does.
            cx.host.close_response_soon();
        }
    }
    false
}

/// A verdict on a streamed answer's tool call; `false` when the callout is not one of its checks.
/// Applied now when the upstream's end is held for it, else at the next upstream chunk.
pub(super) fn stream_call_verdict(
    cx: &mut Ctx<'_>,
    s: &mut Streamed,
    token: u32,
    body_size: usize,
) -> bool {
    let version = Rc::clone(&s.asked.version);
    let Some(calls) = s.calls.as_mut() else {
        return false;
    };
    let Some((_, checking)) = calls.batches.iter_mut().find(|(_, c)| c.waits_for(token)) else {
        return false;
    };
    checking.answered(cx.host, &version, token, body_size);
    let Some(mut kept) = calls.kept.take() else {
        return true;
    };
    let buffered = kept.len();
    let mut out = Vec::new();
    let waiting = settle_stream_calls(cx, s, &mut out, true);
    kept.append(&mut out);
    cx.replace_chunk(buffered, &kept);
    match s.calls.as_mut() {
        Some(calls) if waiting => calls.kept = Some(kept),
        _ => {
            s.calls = None;
            cx.host.resume_response();
        }
    }
    true
}

pub(super) fn tools_context<'a>(
    policy: &'a Policy,
    asked: &'a Asked,
    attempt: u32,
) -> tools::Context<'a> {
    tools::Context {
        policy,
        version: &asked.version,
        intent: asked.request.intent(),
        turn_model: asked.request.model.as_deref(),
        credentials: &asked.credentials,
        attempt,
    }
}

pub(super) fn denied_stop(denial: &Denial) -> Stop {
    Stop {
        stage: Stage::Output,
        check: denial.check.clone(),
        code: stop::Code::ToolCallDenied,
    }
}

/// The answer with its content replaced by the denial's reason, ending as the vendor ends a
/// refusal; a refusal of the filter's own when the answer cannot be rewritten.
fn denied_reply(host: &mut dyn Host, asked: &Asked, denial: &Denial, body: &[u8]) -> api::Reply {
    match api::withheld(asked.api, body, &denial.reason) {
        Ok(body) => api::Reply {
            content_type: "application/json",
            body,
        },
        Err(_) => {
            let ids = fresh_ids(host);
            api::refusal(asked.api, &denial.reason, &asked.request, &ids)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use serde_json::{json, Value};

    use super::*;
    use crate::host::fake::FakeHost;

    const POLICY: &str = r#"{"default_agent": "mail", "agents": {"mail": {"published": "1", "versions": {"1": {
        "tool_checks": [
            {"name": "no-billing", "tool": "send_email", "when": "The email contains billing information", "reason": "No billing info in email."},
            {"name": "no-rival", "args": [{"pointer": "/to", "not_contains": "@rival.example"}]}
        ]}}}}}"#;

    fn turn() -> Turn {
        Turn::new(Rc::new(Policy::from_json(POLICY.as_bytes()).unwrap()))
    }

    fn anthropic_request(host: &mut FakeHost) {
        host.request_headers = [
            (":method", "POST"),
            (":path", "/v1/messages"),
            (":authority", "api.test"),
            ("x-api-key", "sk-ant-test"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        host.request_body = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 100,
            "messages": [
                {"role": "user", "content": "Send Bob the meeting notes"},
                {"role": "assistant", "content": "Which notes?"},
                {"role": "user", "content": [{"type": "text", "text": "Monday's"}]}
            ]
        })
        .to_string()
        .into_bytes();
    }

    fn ask(t: &mut Turn, host: &mut FakeHost) {
        anthropic_request(host);
        t.on_request_headers(host, false);
        let size = host.request_body.len();
        assert_eq!(t.on_request_body(host, size, true), Flow::Continue);
    }

    /// A non-streamed answer calling `send_email` with `to`.
    fn answer(t: &mut Turn, host: &mut FakeHost, to: &str) -> (Flow, Flow) {
        host.response_headers.insert(":status".into(), "200".into());
        host.response_headers
            .insert("content-type".into(), "application/json".into());
        host.response_body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [
                {"type": "text", "text": "Sending it now."},
                {"type": "tool_use", "id": "toolu_1", "name": "send_email", "input": {"to": to, "body": "notes"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 20}
        })
        .to_string()
        .into_bytes();
        let headers = t.on_response_headers(host, false);
        let size = host.response_body.len();
        (headers, t.on_response_body(host, size, true))
    }

    /// The judge answers callout `token` with `status` and `body`.
    fn judge_says(t: &mut Turn, host: &mut FakeHost, token: u32, status: u16, body: &[u8]) {
        host.callout_answer = Some((Some(status), body.to_vec()));
        t.on_callout_response(host, token, body.len());
    }

    fn tool_check(host: &FakeHost, i: usize) -> Value {
        serde_json::from_slice(&host.callouts[i].2).unwrap()
    }

    #[test]
    fn a_call_the_args_rows_deny_is_replaced_at_once_by_the_refusal() {
        let (mut t, mut host) = (turn(), FakeHost::default());
        ask(&mut t, &mut host);
        assert_eq!(
            answer(&mut t, &mut host, "eve@rival.example"),
            (Flow::Continue, Flow::Continue)
        );
        assert!(
            host.callouts.is_empty(),
            "no judge for a call already denied"
        );
        // The answer's headers went on when they came: its held body is replaced.
        assert!(host.local_reply.is_none());
        let body = host.response_json();
        assert_eq!(body["stop_reason"], "refusal");
        assert_eq!(
            body["content"],
            json!([{"type": "text", "text": "The call's arguments hold something a rule forbids."}])
        );
        assert_eq!(body["usage"]["output_tokens"], 20);
        assert!(!String::from_utf8_lossy(&host.response_body).contains("rival"));
        assert_eq!(
            host.counters.get("livecheck.mail.no-rival.failed"),
            Some(&1)
        );
    }

    #[test]
    fn a_call_waits_for_its_judge_and_goes_when_the_condition_does_not_hold() {
        let (mut t, mut host) = (turn(), FakeHost::default());
        ask(&mut t, &mut host);
        assert_eq!(
            answer(&mut t, &mut host, "bob@ok.example"),
            (Flow::Continue, Flow::Pause)
        );
        assert_eq!(host.callouts.len(), 1);
        let sent = tool_check(&host, 0);
        assert_eq!(sent["tool"], "send_email");
        // As the model wrote them (the double serialises keys in order).
        assert_eq!(
            sent["arguments"],
            r#"{"body":"notes","to":"bob@ok.example"}"#
        );
        assert_eq!(
            sent["intent"],
            json!(["Send Bob the meeting notes", "Monday's"])
        );
        assert_eq!(sent["judge_model"], "claude-sonnet-4-5");
        assert!(host.callouts[0]
            .1
            .contains(&("x-api-key".into(), "sk-ant-test".into())));
        judge_says(
            &mut t,
            &mut host,
            1,
            200,
            br#"{"outcome": "passed", "reason": "Meeting notes only."}"#,
        );
        assert_eq!(host.resumed, vec!["response"]);
        assert!(host.local_reply.is_none());
        assert!(!host.response_headers.contains_key("x-core-check"));
        t.on_done(&mut host);
        let report: Value = serde_json::from_slice(&host.delivered[0].body).unwrap();
        let results = report["results"].as_array().unwrap();
        let tools: Vec<(&str, &str, &str)> = results
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap(),
                    r["outcome"].as_str().unwrap(),
                    r["tool"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            tools,
            vec![
                ("no-rival", "passed", "send_email"),
                ("no-billing", "passed", "send_email")
            ]
        );
        assert!(results
            .iter()
            .all(|r| r["call"] == 1 && r["stage"] == "output"));
        assert!(
            !report.to_string().contains("bob@ok.example"),
            "never the arguments"
        );
    }

    #[test]
    fn a_condition_that_holds_denies_with_the_rows_reason() {
        let (mut t, mut host) = (turn(), FakeHost::default());
        ask(&mut t, &mut host);
        answer(&mut t, &mut host, "bob@ok.example");
        judge_says(
            &mut t,
            &mut host,
            1,
            200,
            br#"{"outcome": "failed", "reason": "It has an invoice."}"#,
        );
        assert!(host.local_reply.is_none());
        assert_eq!(
            host.response_json()["content"][0]["text"],
            "No billing info in email."
        );
        assert_eq!(host.resumed, ["response"]);
        assert_eq!(
            host.counters.get("livecheck.mail.no-billing.failed"),
            Some(&1)
        );
    }

    #[test]
    fn a_judge_timeout_denies() {
        let (mut t, mut host) = (turn(), FakeHost::default());
        ask(&mut t, &mut host);
        answer(&mut t, &mut host, "bob@ok.example");
        judge_says(&mut t, &mut host, 1, 504, b"upstream request timeout");
        assert_eq!(host.response_json()["stop_reason"], "refusal");
        assert_eq!(
            host.counters.get("livecheck.mail.no-billing.errored"),
            Some(&1)
        );
    }
}
