//! A Message Batch's question: every request of the batch read and decided on its own by the input
//! rules, before any of it is queued; one refused request refuses the batch whole, naming its
//! `custom_id`. No one waits on a batch's answers, so a refused batch gets Anthropic's error
//! (status 400), not the agent's `blocked_reply`.

use super::*;
use crate::api::BatchRequest;
use crate::verdict::Verdict;

/// A question as read on its endpoint: the request, and for a Message Batch its requests (empty
/// for every other API).
pub(super) fn read(
    endpoint: &Endpoint,
    body: &[u8],
) -> Result<(Request, Vec<BatchRequest>), api::BadRequest> {
    match endpoint.api {
        Api::MessageBatches => api::read_batch(body),
        _ => Ok((api::read_request(endpoint, body)?, Vec::new())),
    }
}

/// The input rules on a question: on its text, or on each request of a batch in order until one
/// stops it, whose `custom_id` is returned. The batch's results are the refused request's, or the
/// last request's when every one passed (a rule check that does not stop passed).
pub(super) fn input_rules<'b>(
    version: &Version,
    request: &Request,
    batch: &'b [BatchRequest],
) -> (Verdict, Option<&'b str>) {
    let rules = |text: &str| {
        decide(
            version,
            Stage::Input,
            &Reading {
                rule_text: text,
                failed: None,
                judged_apply: false,
                readable: true,
                judged: &[],
            },
            1,
        )
    };
    let mut verdict = None;
    for one in batch {
        let decided = rules(&one.request.input_text);
        if decided.stop.is_some() {
            return (decided, Some(&one.custom_id));
        }
        verdict = Some(decided);
    }
    (verdict.unwrap_or_else(|| rules(&request.input_text)), None)
}

/// A batch that judged input checks would read is refused: livecheck judges one question per
/// turn, and a batch holds many.
pub(super) const BATCH_JUDGED_REFUSED: &str =
    "this gateway's judged input checks read one question at a time, and a message batch holds \
     many: send these requests to /v1/messages one by one";

impl Turn {
    /// A batch one of whose requests the input rules refused: refused whole, nothing queued.
    pub(super) fn refuse_batch(
        &mut self,
        host: &mut dyn Host,
        stop: &Stop,
        custom_id: &str,
    ) -> Flow {
        self.state = State::Done;
        let reply = api::batch_refused(custom_id);
        self.cx(host)
            .send_stop(400, stop, reply.content_type, &reply.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version() -> Rc<Version> {
        let policy = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
          "live_checks": [
            {"name": "no-pw", "stage": "input", "kind": "not_contains", "expected": "password"},
            {"name": "no-card", "stage": "input", "kind": "matches_pattern", "pattern": "\\d{16}",
             "max_match": 16}]}}}}}"#;
        Policy::from_json(policy.as_bytes())
            .unwrap()
            .select(None, None, None)
            .unwrap()
    }

    fn batch(texts: &[(&str, &str)]) -> Vec<BatchRequest> {
        texts
            .iter()
            .map(|(id, text)| BatchRequest {
                custom_id: (*id).into(),
                request: Request {
                    input_text: (*text).into(),
                    ..Request::default()
                },
            })
            .collect()
    }

    #[test]
    fn a_batch_stops_at_its_first_refused_request_each_decided_alone() {
        let version = version();
        // The two halves of a card number in two requests are no card number.
        let split = batch(&[("a", "card 12345678"), ("b", "12345678 ok")]);
        let one = Request {
            input_text: "card 12345678\n12345678 ok".into(),
            ..Request::default()
        };
        let (verdict, refused) = input_rules(&version, &one, &split);
        assert_eq!((verdict.stop, refused), (None, None));
        assert_eq!(verdict.results.len(), 2);
        let requests = batch(&[("a", "fine"), ("b", "1234567812345678"), ("c", "password")]);
        let (verdict, refused) = input_rules(&version, &Request::default(), &requests);
        assert_eq!(refused, Some("b"));
        assert_eq!(verdict.stop.map(|s| s.check), Some("no-card".to_owned()));
        let outcomes: Vec<_> = verdict.results.iter().map(|r| r.outcome).collect();
        assert_eq!(outcomes, [Outcome::Passed, Outcome::Failed]);
    }

    #[test]
    fn any_other_question_is_decided_on_its_whole_text() {
        let request = Request {
            input_text: "my password".into(),
            ..Request::default()
        };
        let (verdict, refused) = input_rules(&version(), &request, &[]);
        assert_eq!(refused, None);
        assert_eq!(verdict.stop.map(|s| s.check), Some("no-pw".to_owned()));
    }
}
