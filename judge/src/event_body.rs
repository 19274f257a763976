//! The body of a `response.check_failed` event: what a webhook receiver reads. Below the store, which
//! writes it into the outbox in the transaction that stores the result; [`crate::events`] delivers it.
//! It names the check, its stage, kind and outcome and the turn's response id, and for a tool-call
//! check the tool's name and which call of the answer it was; never a text, a tool call's arguments or
//! a reason.

use livecheck_wire::CheckResult;
use serde_json::json;

use crate::ids;

pub const EVENT_TYPE: &str = "response.check_failed";

/// The event's JSON.
pub fn check_failed_body(
    id: &str,
    created_at_ms: i64,
    result: &CheckResult,
    response_id: &str,
) -> String {
    let mut data = json!({
        "name": result.name,
        "stage": result.stage.as_str(),
        "kind": result.kind,
        "outcome": result.outcome.as_str(),
        "response_id": response_id,
    });
    // Tool-call checks only: absent otherwise, so other events read as they always did.
    if let Some(fields) = data.as_object_mut() {
        if let Some(tool) = &result.tool {
            fields.insert("tool".into(), json!(tool));
        }
        if let Some(call) = result.call {
            fields.insert("call".into(), json!(call));
        }
    }
    json!({
        "type": EVENT_TYPE,
        "id": id,
        "created_at": ids::rfc3339(created_at_ms),
        "data": data,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_event_names_the_tool_and_call_and_other_events_do_not_change() {
        let mut result = CheckResult {
            name: "no-billing-mail".into(),
            stage: livecheck_wire::Stage::Output,
            kind: "tool_check".into(),
            mode: livecheck_wire::Mode::Block,
            attempt: 1,
            outcome: livecheck_wire::Outcome::Failed,
            score: None,
            reason: "REASON-TEXT".into(),
            judge_model: Some("judge-model".into()),
            passed_on_error: false,
            tool: Some("send_email".into()),
            call: Some(2),
            created_at_ms: 0,
            alert: None,
        };
        let body: serde_json::Value =
            serde_json::from_str(&check_failed_body("evt_1", 0, &result, "resp_1")).unwrap();
        assert_eq!(
            body["data"],
            json!({"name": "no-billing-mail", "stage": "output", "kind": "tool_check",
                   "outcome": "failed", "response_id": "resp_1", "tool": "send_email", "call": 2})
        );
        (result.tool, result.call) = (None, None);
        let body = check_failed_body("evt_1", 0, &result, "resp_1");
        assert!(!body.contains("tool\"") && !body.contains("call") && !body.contains("REASON"));
    }
}
