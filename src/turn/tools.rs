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
    /// Starts checking a held answer's `calls`. `Continue` when they may all go at once.
    pub(super) fn check_calls(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        calls: Vec<ToolCall>,
        body: &[u8],
    ) -> Flow {
        let cx = tools_context(&self.policy, &asked, 1);
        let checking = Checking::start(host, &cx, calls);
        let check = Box::new(CallCheck {
            asked,
            checking,
            body: body.to_vec(),
        });
        self.calls_next(host, check, false)
    }

    /// A verdict on a call came back; `false` when the callout is not this turn's.
    pub(super) fn call_verdict(
        &mut self,
        host: &mut dyn Host,
        token: u32,
        body_size: usize,
    ) -> bool {
        let State::CheckingCalls(check) = &mut self.state else {
            return false;
        };
        if !check.checking.waits_for(token) {
            return false;
        }
        let body = host.callout_body(body_size).unwrap_or_default();
        let verdict = judge::verdict(host.callout_status(), &body);
        let version = Rc::clone(&check.asked.version);
        check.checking.verdict(&version, token, verdict.as_ref());
        let State::CheckingCalls(check) = std::mem::replace(&mut self.state, State::Done) else {
            return true;
        };
        let _ = self.calls_next(host, check, true);
        true
    }

    /// Records what was decided, then passes, denies or keeps waiting. `resumed`: called from a
    /// callout's answer, so a pass resumes the held answer through the host.
    fn calls_next(
        &mut self,
        host: &mut dyn Host,
        mut check: Box<CallCheck>,
        resumed: bool,
    ) -> Flow {
        tools_decided(host, &mut self.record, &check.checking.take_results());
        match check.checking.next() {
            Next::Waiting => {
                self.state = State::CheckingCalls(check);
                Flow::Pause
            }
            Next::Allowed => {
                self.state = State::Done;
                resume(host, Stage::Output, resumed)
            }
            Next::Denied(denial) => {
                self.state = State::Done;
                let reply = denied_reply(host, &check.asked, &denial, &check.body);
                // The answer's headers are still held: a local reply replaces the whole answer.
                send_stop(
                    host,
                    &self.record,
                    &denied_stop(&denial),
                    reply.content_type,
                    &reply.body,
                )
            }
        }
    }
}

pub(super) fn tools_context<'a>(
    policy: &'a Policy,
    asked: &'a Asked,
    attempt: u32,
) -> tools::Context<'a> {
    tools::Context {
        policy,
        version: &asked.version,
        intent: &asked.request.intent,
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
