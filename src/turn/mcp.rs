//! An MCP `tools/call` passing through Envoy: its body held until its tool checks decided; forwarded untouched when allowed, else answered here as a tool result with
//! `isError: true`, so the MCP server is never called.

use serde_json::Value;

use crate::mcp::{self, Message};
use crate::record::tools_decided;
use crate::tools::{self, Checking, Next};

use super::tools::denied_stop;
use super::*;

/// A `tools/call` with its checks out.
pub(super) struct McpCheck {
    version: Rc<Version>,
    id: Value,
    checking: Checking,
}

impl Turn {
    /// Request headers of a POST to an MCP endpoint: when the version checks tool calls at all,
    /// its body is held and read.
    pub(super) fn start_mcp(&mut self, host: &mut dyn Host, end_of_stream: bool) -> Flow {
        let version = match self.begin(host) {
            Ok(v) => v,
            Err(e) => return self.refuse_mcp(host, 400, None, -32600, &e.to_string()),
        };
        if !version.tools.any() || end_of_stream {
            // Nothing to check: no record, no report.
            self.record = Record::default();
            self.state = State::Bypass;
            return Flow::Continue;
        }
        let encoded = host
            .request_header("content-encoding")
            .is_some_and(|e| !e.trim().eq_ignore_ascii_case("identity"));
        if encoded {
            let message = "livecheck reads MCP requests as they are written: send them without content-encoding";
            return self.refuse_mcp(host, 415, None, -32600, message);
        }
        self.state = State::ReadingMcp { version };
        // As for a model's question: the headers go on, the body (the call) is held.
        Flow::Continue
    }

    /// A chunk of the held MCP request (the turn was `ReadingMcp`, of `version`).
    pub(super) fn on_mcp_body(
        &mut self,
        host: &mut dyn Host,
        version: Rc<Version>,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        if body_size > self.policy.max_body_bytes {
            let message = "the request body is larger than this gateway reads";
            return self.refuse_mcp(host, 413, None, -32600, message);
        }
        if !end_of_stream {
            self.state = State::ReadingMcp { version };
            return Flow::Pause;
        }
        let body = host.request_body(body_size).unwrap_or_default();
        let (id, call) = match mcp::read(&body) {
            Message::Other => {
                self.state = State::Done;
                return Flow::Continue;
            }
            Message::Refused {
                status,
                code,
                message,
            } => return self.refuse_mcp(host, status, None, code, message),
            Message::ToolsCall { id, call } => (id, call),
        };
        // The agent's intent is not in an MCP request; the judge runs on the version's model
        // and the sidecar's own key (the caller's credentials are the MCP server's, not a model's).
        let cx = tools::Context {
            policy: &self.policy,
            version: &version,
            intent: Vec::new(),
            turn_model: version.model.as_deref(),
            credentials: &[],
            attempt: 1,
        };
        let checking = Checking::start(host, &cx, vec![call], 0);
        let check = Box::new(McpCheck {
            version,
            id,
            checking,
        });
        self.mcp_next(host, check, false)
    }

    /// A verdict on an MCP call (the turn's state, taken); `false` when the callout is not this
    /// turn's.
    pub(super) fn mcp_verdict(
        &mut self,
        host: &mut dyn Host,
        mut check: Box<McpCheck>,
        token: u32,
        body_size: usize,
    ) -> bool {
        if !check.checking.waits_for(token) {
            self.state = State::CheckingMcp(check);
            return false;
        }
        let version = Rc::clone(&check.version);
        check.checking.answered(host, &version, token, body_size);
        let _ = self.mcp_next(host, check, true);
        true
    }

    fn mcp_next(&mut self, host: &mut dyn Host, mut check: Box<McpCheck>, resumed: bool) -> Flow {
        let tools = &check.version.tools;
        tools_decided(
            host,
            &mut self.record,
            tools,
            &check.checking.take_results(),
        );
        match check.checking.next() {
            Next::Waiting => {
                self.state = State::CheckingMcp(check);
                Flow::Pause
            }
            Next::Allowed => {
                self.state = State::Done;
                resume(host, Stage::Input, resumed)
            }
            Next::Denied(denial) => {
                self.state = State::Done;
                let body = mcp::denied(&check.id, &denial.reason);
                self.cx(host)
                    .send_stop(200, &denied_stop(&denial), "application/json", &body)
            }
        }
    }

    fn refuse_mcp(
        &mut self,
        host: &mut dyn Host,
        status: u32,
        id: Option<&Value>,
        code: i64,
        message: &str,
    ) -> Flow {
        self.state = State::Done;
        let body = mcp::error(id, code, message);
        host.send_local_reply(status, &[("content-type", "application/json")], &body);
        Flow::Pause
    }
}
