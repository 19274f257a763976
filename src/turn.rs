//! One turn through the filter: the per-stream state machine.
//!
//! The request's headers are held while its body is read and the input checks decide; a stopped
//! question is answered locally in the vendor's shape and never reaches upstream. A non-streamed
//! answer is held (headers included) until the output checks decided; a stopped answer is
//! replaced by the withheld form. One place (`Turn`'s callbacks) decides whether the stream goes on.

use std::rc::Rc;

use crate::config::{Policy, Stage, Version};
use crate::host::{Flow, Host, LogLevel};
use crate::stop::{self, Stop};
use crate::vendor::{self, Api, Ids, Request};
use crate::verdict::{decide, Reading, Verdict};

pub struct Turn {
    policy: Rc<Policy>,
    state: State,
}

enum State {
    /// Not a call livecheck checks (another path or method): passes untouched.
    Bypass,
    /// Request headers held; the body is being read.
    ReadingQuestion { api: Api, version: Rc<Version> },
    /// The question passed and went upstream.
    AwaitingAnswer(Asked),
    /// A non-streamed answer: headers held, body buffered until it is complete.
    HoldingAnswer { asked: Asked, readable: bool },
    /// Decided: everything left passes as it is.
    Done,
}

struct Asked {
    api: Api,
    version: Rc<Version>,
    request: Request,
}

impl Turn {
    pub fn new(policy: Rc<Policy>) -> Self {
        Self {
            policy,
            state: State::Bypass,
        }
    }

    pub fn on_request_headers(&mut self, host: &mut dyn Host, end_of_stream: bool) -> Flow {
        let method = host.request_header(":method").unwrap_or_default();
        let path = host.request_header(":path").unwrap_or_default();
        let Some(api) = Api::from_request(&method, &path) else {
            self.state = State::Bypass;
            return Flow::Continue;
        };
        let agent = host.request_header(&self.policy.agent_header);
        let version = host.request_header(&self.policy.version_header);
        let authority = host.request_header(":authority");
        let version =
            match self
                .policy
                .select(agent.as_deref(), version.as_deref(), authority.as_deref())
            {
                Ok(v) => v,
                Err(e) => return self.refuse_request(host, api, 400, &e.to_string()),
            };
        if let Some(encoding) = host.request_header("content-encoding") {
            if !encoding.trim().eq_ignore_ascii_case("identity") {
                return self.refuse_request(
                    host,
                    api,
                    415,
                    "livecheck reads request bodies as they are written: send them without content-encoding",
                );
            }
        }
        let declared = host
            .request_header("content-length")
            .and_then(|l| l.trim().parse::<usize>().ok());
        if declared.is_some_and(|len| len > self.policy.max_body_bytes) {
            return self.too_large(host, api);
        }
        if end_of_stream {
            return self.refuse_request(host, api, 400, "the request has no body");
        }
        // Answers must be readable to be checked.
        host.set_request_header("accept-encoding", Some("identity"));
        self.state = State::ReadingQuestion { api, version };
        // Holding the headers keeps the question from upstream until it passed; Envoy still
        // delivers the body because the filter config sets `allow_on_headers_stop_iteration`.
        Flow::Pause
    }

    pub fn on_request_body(
        &mut self,
        host: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        let State::ReadingQuestion { api, version } = &self.state else {
            return Flow::Continue;
        };
        let (api, version) = (*api, Rc::clone(version));
        if body_size > self.policy.max_body_bytes {
            return self.too_large(host, api);
        }
        if !end_of_stream {
            return Flow::Pause;
        }
        let Some(body) = host.request_body(body_size) else {
            return self.refuse_request(host, api, 400, "the request body could not be read");
        };
        let request = match vendor::parse_request(api, &body) {
            Ok(r) => r,
            Err(e) => return self.refuse_request(host, api, 400, &e.to_string()),
        };
        let verdict = decide(
            &version,
            Stage::Input,
            &Reading {
                rule_text: &request.input_text,
                judged_apply: true,
                readable: true,
            },
            1,
        );
        self.count(host, &version, &verdict);
        if let Some(stop) = &verdict.stop {
            let ids = fresh_ids(host);
            let reply = vendor::refusal(api, &version.blocked_reply, &request, &ids);
            self.state = State::Done;
            return send_stop(host, stop, reply.content_type, &reply.body);
        }
        self.state = State::AwaitingAnswer(Asked {
            api,
            version,
            request,
        });
        Flow::Continue
    }

    pub fn on_response_headers(&mut self, host: &mut dyn Host, end_of_stream: bool) -> Flow {
        let State::AwaitingAnswer(_) = &self.state else {
            return Flow::Continue;
        };
        let State::AwaitingAnswer(asked) = std::mem::replace(&mut self.state, State::Done) else {
            return Flow::Continue;
        };
        let status = host.response_header(":status").unwrap_or_default();
        // Error answers carry no model text; they reach the caller as the vendor sent them.
        if !status.starts_with('2') || !has_blocking_output_checks(&asked.version) {
            return Flow::Continue;
        }
        let identity = host
            .response_header("content-encoding")
            .is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
        let streamed = host
            .response_header("content-type")
            .is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
        // A streamed answer is not yet read event by event: it is held whole and, since this
        // reader does not parse events, withheld as unreadable rather than let through unchecked.
        let readable = identity && !streamed;
        if end_of_stream {
            // An empty answer has nothing to check but cannot be read as the vendor's shape either.
            return self.finish_answer(host, asked, &[], readable);
        }
        // The body will change size when withheld.
        host.set_response_header("content-length", None);
        self.state = State::HoldingAnswer { asked, readable };
        Flow::Pause
    }

    pub fn on_response_body(
        &mut self,
        host: &mut dyn Host,
        body_size: usize,
        end_of_stream: bool,
    ) -> Flow {
        let State::HoldingAnswer { .. } = &self.state else {
            return Flow::Continue;
        };
        if !end_of_stream && body_size <= self.policy.max_body_bytes {
            return Flow::Pause;
        }
        let State::HoldingAnswer { asked, readable } =
            std::mem::replace(&mut self.state, State::Done)
        else {
            return Flow::Continue;
        };
        let fits = body_size <= self.policy.max_body_bytes;
        let body = if fits {
            host.response_body(body_size)
        } else {
            None
        };
        let readable = readable && body.is_some();
        let flow = self.finish_answer(host, asked, body.as_deref().unwrap_or_default(), readable);
        if fits {
            return flow;
        }
        // Too large to hold: the answer is withheld and what remains of it dropped.
        let _ = host.replace_response_body(body_size, b"");
        flow
    }

    /// Decides a complete non-streamed answer and rewrites it when a check stopped it.
    fn finish_answer(
        &mut self,
        host: &mut dyn Host,
        asked: Asked,
        body: &[u8],
        readable: bool,
    ) -> Flow {
        let answer = readable
            .then(|| vendor::parse_answer(asked.api, body).ok())
            .flatten();
        let verdict = decide(
            &asked.version,
            Stage::Output,
            &Reading {
                rule_text: answer.as_ref().map_or("", |a| a.rule_text.as_str()),
                judged_apply: answer.as_ref().is_some_and(|a| !a.asks_for_tool),
                readable: answer.is_some(),
            },
            1,
        );
        self.count(host, &asked.version, &verdict);
        self.state = State::Done;
        let Some(stop) = verdict.stop else {
            return Flow::Continue;
        };
        let reply = &asked.version.blocked_reply;
        // A readable answer keeps its id, model and usage; one that could not be read is replaced
        // by a refusal in the shape the caller asked for.
        let withheld = answer
            .is_some()
            .then(|| vendor::withheld(asked.api, body, reply).ok())
            .flatten()
            .map(|body| vendor::Reply {
                content_type: "application/json",
                body,
            })
            .unwrap_or_else(|| {
                let ids = fresh_ids(host);
                vendor::refusal(asked.api, reply, &asked.request, &ids)
            });
        if let Some(value) = stop.header_value() {
            host.set_response_header(stop::HEADER, Some(&value));
        }
        host.set_response_header("content-type", Some(withheld.content_type));
        // The filter's own body is plain: whatever encoding upstream declared no longer applies.
        host.set_response_header("content-encoding", None);
        if !host.replace_response_body(body.len(), &withheld.body) {
            host.log(
                LogLevel::Error,
                "livecheck: could not replace a withheld answer",
            );
        }
        Flow::Continue
    }

    fn refuse_request(
        &mut self,
        host: &mut dyn Host,
        api: Api,
        status: u32,
        message: &str,
    ) -> Flow {
        self.state = State::Done;
        let reply = vendor::error(api, status as u16, message);
        host.send_local_reply(status, &[("content-type", reply.content_type)], &reply.body);
        Flow::Pause
    }

    fn too_large(&mut self, host: &mut dyn Host, api: Api) -> Flow {
        let limit = self.policy.max_body_bytes;
        self.refuse_request(
            host,
            api,
            413,
            &format!("the request body is larger than this gateway reads ({limit} bytes)"),
        )
    }

    fn count(&self, host: &mut dyn Host, version: &Version, verdict: &Verdict) {
        for result in &verdict.results {
            if let Some(check) = version.checks.get(result.check) {
                host.increment_counter(&format!(
                    "livecheck.{}.{}.{}",
                    version.agent,
                    check.name,
                    result.outcome.as_str()
                ));
            }
        }
    }
}

/// Ids for a body the filter writes itself: a random token and the host's clock.
fn fresh_ids(host: &mut dyn Host) -> Ids {
    Ids {
        token: format!("lc{:016x}{:08x}", host.random(), host.random() as u32),
        created: host.now_unix_seconds(),
    }
}

fn has_blocking_output_checks(version: &Version) -> bool {
    version
        .checks
        .iter()
        .any(|c| c.stage == Stage::Output && c.mode == crate::config::Mode::Block)
}

fn send_stop(host: &mut dyn Host, stop: &Stop, content_type: &str, body: &[u8]) -> Flow {
    let header = stop.header_value().unwrap_or_default();
    host.send_local_reply(
        200,
        &[("content-type", content_type), (stop::HEADER, &header)],
        body,
    );
    Flow::Pause
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::host::fake::FakeHost;

    const SEED: &str = include_str!("../examples/seed.json");

    fn turn() -> Turn {
        Turn::new(Rc::new(Policy::from_json(SEED.as_bytes()).unwrap()))
    }

    fn chat_request(question: &str) -> FakeHost {
        let mut host =
            FakeHost::with_request(&[(":method", "POST"), (":path", "/v1/chat/completions")]);
        host.request_body = serde_json::json!({
            "model": "gpt-4.1-mini",
            "messages": [{"role": "user", "content": question}]
        })
        .to_string()
        .into_bytes();
        host
    }

    /// Headers, then the whole body in one callback: what reaches the turn.
    fn ask(turn: &mut Turn, host: &mut FakeHost) -> (Flow, Flow) {
        let headers = turn.on_request_headers(host, false);
        let size = host.request_body.len();
        (headers, turn.on_request_body(host, size, true))
    }

    fn answer(turn: &mut Turn, host: &mut FakeHost, text: &str) -> (Flow, Flow) {
        host.response_headers.insert(":status".into(), "200".into());
        host.response_headers
            .insert("content-type".into(), "application/json".into());
        host.response_body = serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        })
        .to_string()
        .into_bytes();
        let headers = turn.on_response_headers(host, false);
        let size = host.response_body.len();
        (headers, turn.on_response_body(host, size, true))
    }

    #[test]
    fn request_headers_are_held_until_the_question_passed() {
        let (mut t, mut host) = (turn(), chat_request("where is my order?"));
        assert_eq!(ask(&mut t, &mut host), (Flow::Pause, Flow::Continue));
        assert_eq!(
            host.request_headers
                .get("accept-encoding")
                .map(String::as_str),
            Some("identity")
        );
        assert!(host.local_reply.is_none());
    }

    #[test]
    fn a_refused_question_is_answered_locally_with_the_header() {
        let (mut t, mut host) = (turn(), chat_request("my password is x"));
        assert_eq!(ask(&mut t, &mut host), (Flow::Pause, Flow::Pause));
        let reply = host.local_reply.as_ref().unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(
            reply.headers.get("x-core-check").map(String::as_str),
            Some(r#"stage=input, check="no-passwords", code=input_check_failed"#)
        );
        assert_eq!(
            host.local_reply_json()["choices"][0]["finish_reason"],
            "content_filter"
        );
        assert_eq!(
            host.counters.get("livecheck.orders.no-passwords.failed"),
            Some(&1)
        );
    }

    #[test]
    fn the_request_body_is_buffered_until_its_end() {
        let (mut t, mut host) = (turn(), chat_request("hello"));
        assert_eq!(t.on_request_headers(&mut host, false), Flow::Pause);
        assert_eq!(t.on_request_body(&mut host, 3, false), Flow::Pause);
        let size = host.request_body.len();
        assert_eq!(t.on_request_body(&mut host, size, true), Flow::Continue);
    }

    #[test]
    fn a_forbidden_answer_is_withheld_and_its_headers_held_until_decided() {
        let (mut t, mut host) = (turn(), chat_request("hello"));
        ask(&mut t, &mut host);
        assert_eq!(
            answer(&mut t, &mut host, "NL91ABNA0417164300"),
            (Flow::Pause, Flow::Continue)
        );
        let body: serde_json::Value = serde_json::from_slice(&host.response_body).unwrap();
        assert_eq!(body["choices"][0]["finish_reason"], "content_filter");
        assert_eq!(body["usage"]["completion_tokens"], 4);
        assert!(!String::from_utf8_lossy(&host.response_body).contains("NL91"));
        assert!(host.response_headers.contains_key("x-core-check"));
    }

    #[test]
    fn a_clean_answer_is_left_as_it_is() {
        let (mut t, mut host) = (turn(), chat_request("hello"));
        ask(&mut t, &mut host);
        answer(&mut t, &mut host, "fine");
        let body: serde_json::Value = serde_json::from_slice(&host.response_body).unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "fine");
        assert!(!host.response_headers.contains_key("x-core-check"));
    }

    #[test]
    fn other_calls_pass_untouched() {
        let mut t = turn();
        let mut host = FakeHost::with_request(&[(":method", "GET"), (":path", "/v1/models")]);
        assert_eq!(t.on_request_headers(&mut host, true), Flow::Continue);
        assert_eq!(t.on_response_headers(&mut host, false), Flow::Continue);
        assert!(!host.request_headers.contains_key("accept-encoding"));
    }
}
