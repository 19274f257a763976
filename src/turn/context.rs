//! What the handlers of one callback share: the host, the policy and the turn's record, passed as
//! one value ([`Ctx`]) rather than as three arguments to every handler; and the writes that need
//! only them (a check counted, background checks queued, a chunk rewritten, a stop answered).

use super::*;

/// The host, the policy and the turn's record, borrowed for one callback.
pub(super) struct Ctx<'a> {
    pub(super) host: &'a mut dyn Host,
    pub(super) policy: &'a Policy,
    pub(super) record: &'a mut Record,
}

impl Ctx<'_> {
    pub(super) fn count_one(&mut self, version: &Version, check: usize, outcome: Outcome) {
        let passed_on_error = outcome == Outcome::Errored
            && version.checks.get(check).is_some_and(|c| c.on_error_pass);
        decided(
            self.host,
            self.record,
            version,
            &[CheckResult {
                check,
                outcome,
                passed_on_error,
                attempt: 1,
            }],
        );
    }

    /// A stream that ended without a cut: every blocking output rule check passed.
    pub(super) fn count_passed(&mut self, version: &Version) {
        for (i, check) in version.checks.iter().enumerate() {
            if check.blocks_output() && check.kind.is_rule() {
                self.count_one(version, i, Outcome::Passed);
            }
        }
    }

    /// A turn that completed normally: its background checks, drawn at their sample rates, go to
    /// the outbox. The turn itself is not touched.
    pub(super) fn queue_background(&mut self, asked: &Asked, answer: &str) {
        let read = Judged {
            stage: Stage::Output,
            text: answer,
            question: Some(asked.request.last_user_text()),
            turn_model: asked.request.model.as_deref(),
            credentials: &asked.credentials,
        };
        let host = &mut *self.host;
        for (check, judge) in
            judge::background_draws(self.policy, &asked.version, &read, &mut || host.random())
        {
            self.record.background(check, judge);
        }
    }

    /// Answers the turn here with `body` and `status`, its header naming the stop; nothing goes on.
    pub(super) fn send_stop(
        &mut self,
        status: u32,
        stop: &Stop,
        content_type: &str,
        body: &[u8],
    ) -> Flow {
        let header = stop.header_value().unwrap_or_default();
        self.host.send_local_reply(
            status,
            &[
                ("content-type", content_type),
                (stop::HEADER, &header),
                (livecheck_wire::TURN_ID_HEADER, &self.record.turn_id),
            ],
            body,
        );
        Flow::Pause
    }

    /// [`Ctx::replace_chunk`], unless `out` is what the buffer already holds (`buffered`, all of
    /// its `body_size` bytes): a chunk with nothing to change costs no host call.
    pub(super) fn replace_changed(&mut self, body_size: usize, buffered: &[u8], out: &[u8]) {
        // Most chunks of a stream that passes as it came: compared eight bytes a step (`swar`).
        if buffered.len() == body_size && crate::swar::eq(buffered, out) {
            return;
        }
        self.replace_chunk(body_size, out);
    }

    pub(super) fn replace_chunk(&mut self, body_size: usize, out: &[u8]) {
        if !self.host.replace_response_body(body_size, out) {
            self.host.log(
                LogLevel::Error,
                "livecheck: could not rewrite a streamed chunk",
            );
        }
    }
}
