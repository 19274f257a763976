//! Tool-call checks: whether the tool calls of an answer (or an MCP `tools/call`) may go.
//!
//! Rows only deny. The filter's own tests run first, on every call: `allowed_tools` (a call to a
//! tool no glob names is denied) and the `args` rows. A denied call denies the answer, so then no
//! judge is asked. Otherwise every `when` row of every call goes to the judge in parallel
//! (`POST /v1/tool-check` on the sidecar); the first verdict that the condition holds, or that the
//! judge could not decide, denies, and the rest are not waited for. One result per row and call.

use std::borrow::Cow;

use livecheck_wire::reasons::{
    ARGS_FORBIDDEN, ARGS_PASSED, ARGS_UNREADABLE, TOOL_ALLOWED as ALLOWED,
    TOOL_COULD_NOT_CHECK as COULD_NOT_CHECK, TOOL_NOT_ALLOWED as NOT_ALLOWED,
};
use livecheck_wire::{JudgeVerdict, ToolCheckRequest, TOOL_CHECK_PATH};

use crate::api::ToolCall;
use crate::check::{Outcome, ToolResult};
use crate::config::{ArgRule, Policy, ToolRow, ToolTest, Version, ALLOWED_TOOLS};
use crate::host::Host;
use crate::json::Node;
use crate::judge;

/// What the judge of a tool call reads beside the call, and whose key it runs on.
pub struct Context<'a> {
    pub policy: &'a Policy,
    pub version: &'a Version,
    /// The user's last messages, oldest first.
    pub intent: Vec<&'a str>,
    /// The model the turn runs on (the judge's model unless the row names one).
    pub turn_model: Option<&'a str>,
    pub credentials: &'a [(String, String)],
    /// 1 for the first answer, 2 for the first answer asked for again.
    pub attempt: u32,
}

/// Why the calls may not go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The row (or `allowed_tools`) that denied: what `X-Core-Check` names.
    pub check: String,
    /// Shown to the agent: the row's `reason`, else the judge's explanation or a fixed sentence.
    pub reason: String,
    /// The row asks for the model to be asked again.
    pub recover: bool,
    /// Index of the denied call.
    pub call: usize,
    /// The denied call's tool.
    pub tool: String,
}

impl Denial {
    /// What a retry tells the model it broke (never the call's arguments).
    pub fn as_rule(&self) -> String {
        format!(
            "Your call of the tool {:?} was denied: {}",
            self.tool, self.reason
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Every call may go.
    Allowed,
    Denied(Denial),
    /// Verdicts are pending.
    Waiting,
}

/// The tool calls of one answer being checked.
#[derive(Debug)]
pub struct Checking {
    /// How many calls of the answer came before `calls`.
    first: usize,
    calls: Vec<ToolCall>,
    /// The `when` rows with the judge.
    pending: Vec<Pending>,
    /// Decided and not yet taken by [`Checking::take_results`].
    results: Vec<ToolResult>,
    denied: Option<Denial>,
    attempt: u32,
}

/// A `when` row of a call, with the judge.
#[derive(Debug)]
struct Pending {
    token: u32,
    call: usize,
    row: usize,
    judge_model: String,
}

impl Checking {
    /// Checks `calls`: the filter's tests now, then the `when` rows sent to the judge.
    /// `first`: how many calls of the answer came before these (a stream checks its calls as
    /// they complete), so results number every call of the answer once.
    pub fn start(
        host: &mut dyn Host,
        cx: &Context<'_>,
        calls: Vec<ToolCall>,
        first: usize,
    ) -> Self {
        let mut checking = Self {
            first,
            calls,
            pending: Vec::new(),
            results: Vec::new(),
            denied: None,
            attempt: cx.attempt,
        };
        checking.filter_tests(cx);
        if checking.denied.is_none() {
            checking.ask_judge(host, cx);
        }
        checking
    }

    pub fn next(&self) -> Next {
        match (&self.denied, self.pending.is_empty()) {
            (Some(denial), _) => Next::Denied(denial.clone()),
            (None, true) => Next::Allowed,
            (None, false) => Next::Waiting,
        }
    }

    /// Whether `token` is a callout of this check.
    pub fn waits_for(&self, token: u32) -> bool {
        self.pending.iter().any(|p| p.token == token)
    }

    /// The judge answered callout `token`: its verdict read from the callout's answer (anything
    /// but a 200 with a valid verdict could not decide).
    pub fn answered(&mut self, host: &dyn Host, version: &Version, token: u32, body_size: usize) {
        let body = host.callout_body(body_size).unwrap_or_default();
        let verdict = judge::verdict(host.callout_status(), &body);
        self.verdict(version, token, verdict.as_ref());
    }

    /// The judge's verdict on callout `token` (`None`: no valid verdict came back).
    pub fn verdict(&mut self, version: &Version, token: u32, verdict: Option<&JudgeVerdict>) {
        let Some(at) = self.pending.iter().position(|p| p.token == token) else {
            return;
        };
        let Pending {
            call,
            row,
            judge_model,
            ..
        } = self.pending.remove(at);
        let Some(r) = version.tools.rows.get(row) else {
            return;
        };
        let outcome = judge::outcome(verdict);
        let said = verdict
            .map(|v| v.reason.trim())
            .filter(|r| !r.is_empty())
            .unwrap_or(COULD_NOT_CHECK)
            .to_owned();
        self.result(row, call, outcome, said.clone().into(), Some(judge_model));
        if outcome != Outcome::Passed && self.denied.is_none() {
            let shown = match outcome {
                Outcome::Failed => said,
                _ => COULD_NOT_CHECK.to_owned(),
            };
            self.deny(r, call, shown);
        }
    }

    /// Results decided since the last call, in the order decided.
    pub fn take_results(&mut self) -> Vec<ToolResult> {
        std::mem::take(&mut self.results)
    }

    fn filter_tests(&mut self, cx: &Context<'_>) {
        let tools = &cx.version.tools;
        for call in 0..self.calls.len() {
            let Some(name) = self.calls.get(call).map(|c| c.name.clone()) else {
                continue;
            };
            if let Some(allowed) = &tools.allowed {
                let ok = allowed.iter().any(|g| g.matches(&name));
                self.results.push(ToolResult {
                    row: None,
                    tool: name.clone(),
                    call: number(self.first.saturating_add(call)),
                    attempt: self.attempt,
                    outcome: if ok { Outcome::Passed } else { Outcome::Failed },
                    reason: Cow::Borrowed(if ok { ALLOWED } else { NOT_ALLOWED }),
                    judge_model: None,
                });
                if !ok && self.denied.is_none() {
                    self.denied = Some(Denial {
                        check: ALLOWED_TOOLS.to_owned(),
                        // Nothing of a denied call reaches the caller, its name included.
                        reason: NOT_ALLOWED.to_owned(),
                        recover: false,
                        call,
                        tool: name.clone(),
                    });
                }
            }
            for (index, row) in tools.rows.iter().enumerate() {
                let ToolTest::Args(rules) = &row.test else {
                    continue;
                };
                if !row.tool.matches(&name) {
                    continue;
                }
                let outcome = self
                    .calls
                    .get(call)
                    .map_or(Outcome::Errored, |c| args_test(rules, c));
                let reason = match outcome {
                    Outcome::Passed => ARGS_PASSED,
                    Outcome::Failed => ARGS_FORBIDDEN,
                    Outcome::Errored => ARGS_UNREADABLE,
                };
                self.result(index, call, outcome, Cow::Borrowed(reason), None);
                if outcome != Outcome::Passed && self.denied.is_none() {
                    self.deny(row, call, reason.to_owned());
                }
            }
        }
    }

    fn ask_judge(&mut self, host: &mut dyn Host, cx: &Context<'_>) {
        for call in 0..self.calls.len() {
            for (index, row) in cx.version.tools.rows.iter().enumerate() {
                let (ToolTest::When(condition), Some(c)) = (&row.test, self.calls.get(call)) else {
                    continue;
                };
                if !row.tool.matches(&c.name) {
                    continue;
                }
                let model = judge_model(cx.policy, row, cx.turn_model);
                let token = model.as_ref().and_then(|model| {
                    let request = ToolCheckRequest {
                        condition: condition.clone(),
                        tool: c.name.clone(),
                        arguments: c.arguments.clone(),
                        intent: cx.intent.iter().map(|t| (*t).to_owned()).collect(),
                        judge_model: model.clone(),
                    };
                    let body = serde_json::to_vec(&request).ok()?;
                    let mut headers = judge::base_headers(cx.policy, TOOL_CHECK_PATH);
                    headers.extend(cx.credentials.iter().cloned());
                    let headers: Vec<(&str, &str)> = headers
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    host.dispatch_callout(&cx.policy.judge_cluster, &headers, &body, row.timeout_ms)
                });
                match token.zip(model.clone()) {
                    Some((token, judge_model)) => self.pending.push(Pending {
                        token,
                        call,
                        row: index,
                        judge_model,
                    }),
                    None => {
                        // No judge model (a router turn, and the row names none), or Envoy
                        // refused the callout: the row cannot decide, which denies.
                        self.result(
                            index,
                            call,
                            Outcome::Errored,
                            Cow::Borrowed(COULD_NOT_CHECK),
                            model,
                        );
                        self.deny(row, call, COULD_NOT_CHECK.to_owned());
                        return;
                    }
                }
            }
        }
    }

    fn result(
        &mut self,
        row: usize,
        call: usize,
        outcome: Outcome,
        reason: Cow<'static, str>,
        judge_model: Option<String>,
    ) {
        self.results.push(ToolResult {
            row: Some(row),
            tool: self
                .calls
                .get(call)
                .map(|c| c.name.clone())
                .unwrap_or_default(),
            call: number(self.first.saturating_add(call)),
            attempt: self.attempt,
            outcome,
            reason,
            judge_model,
        });
    }

    /// The first denial stands; `said` is shown when the row gives no reason of its own.
    fn deny(&mut self, row: &ToolRow, call: usize, said: String) {
        if self.denied.is_some() {
            return;
        }
        self.denied = Some(Denial {
            check: row.name.clone(),
            reason: row.reason.clone().unwrap_or(said),
            recover: row.recover,
            call,
            tool: self
                .calls
                .get(call)
                .map(|c| c.name.clone())
                .unwrap_or_default(),
        });
    }
}

/// 1-based call number.
fn number(call: usize) -> u32 {
    u32::try_from(call).unwrap_or(u32::MAX).saturating_add(1)
}

/// The row's judge model, else the turn's (unless the turn runs a router).
fn judge_model(policy: &Policy, row: &ToolRow, turn_model: Option<&str>) -> Option<String> {
    match (&row.judge_model, turn_model) {
        (Some(m), _) => Some(m.clone()),
        (None, Some(m)) if !policy.router_models.iter().any(|r| r == m) => Some(m.to_owned()),
        _ => None,
    }
}

/// An `args` row on one call: failed when any rule matches the text at its pointer, errored when
/// JSON arguments cannot be read (strictly: a repeated key is unreadable, as the tool's own parser
/// might keep either value). Free-text input (a custom tool) is what the pointer `""` reads. Read on
/// the parsed tree as it lies, as `serde_json::Value::pointer` and a `Value` would read it.
fn args_test(rules: &[ArgRule], call: &ToolCall) -> Outcome {
    // Made only for arguments that are parsed.
    let arena;
    let arguments = if !call.json {
        Node::Str(call.arguments.as_str())
    } else if call.arguments.trim().is_empty() {
        return Outcome::Passed;
    } else {
        arena = crate::json::arena_for(call.arguments.as_bytes());
        match crate::json::parse_node(call.arguments.as_bytes(), &arena) {
            Ok(node) => node,
            Err(_) => return Outcome::Errored,
        }
    };
    let hit = rules.iter().any(|rule| {
        pointer(&arguments, &rule.pointer).is_some_and(|v| {
            let mut text = String::new();
            text_under(v, &mut text);
            rule.rule.first_hit(&text).is_some()
        })
    });
    if hit {
        Outcome::Failed
    } else {
        Outcome::Passed
    }
}

/// The value a JSON pointer (RFC 6901) names, as `serde_json::Value::pointer` finds it: `""` is
/// the whole; `~1` and `~0` stand for `/` and `~`; an array index is digits without a sign or a
/// leading zero.
fn pointer<'n, 'a>(node: &'n Node<'a>, pointer: &str) -> Option<&'n Node<'a>> {
    if pointer.is_empty() {
        return Some(node);
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .try_fold(node, |target, token| {
            // Most tokens hold no escape: read as they are.
            let token = if token.contains('~') {
                Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
            } else {
                Cow::Borrowed(token)
            };
            match target {
                Node::Object(members) => members.get(&token),
                Node::Array(items) => array_index(&token).and_then(|i| items.get(i)),
                _ => None,
            }
        })
}

fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Every key, string, number and boolean under `node`, one per line; an object's members in the
/// order of their keys (as a `serde_json::Map` lists them).
fn text_under(node: &Node<'_>, out: &mut String) {
    let mut push = |s: &str| {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(s);
    };
    match node {
        Node::Null => {}
        Node::Bool(b) => push(if *b { "true" } else { "false" }),
        Node::Number(n) => push(&n.to_string()),
        Node::Str(s) => push(s),
        Node::Array(items) => items.iter().for_each(|v| text_under(v, out)),
        Node::Object(members) => {
            for (k, v) in members.members_by_key() {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(k);
                text_under(v, out);
            }
        }
    }
}

#[cfg(test)]
mod tests;
