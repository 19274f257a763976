//! Length framing for streamed answers: an opt-in (`stream_frame_bytes`) so that a cut ends the
//! response cleanly for every HTTP/1.1 SDK, at the cost of padding every framed answer.
//!
//! Envoy's wasm ABI cannot end a response early: resetting the stream makes the Anthropic SDK and
//! the OpenAI Responses clients raise after the closing events (they read to the end), and
//! dropping the rest keeps them waiting until the model stops. By default a cut writes the
//! vendor's closing events and resets the stream (the Chat SDK ends at `[DONE]`; the others raise
//! a connection error). With a frame, a streamed answer the filter may cut goes out with a fixed
//! `content-length`; a cut writes the closing events and pads the body to that length with SSE
//! comment lines, which every client skips, and the stream is closed at the next upstream chunk
//! (or by the root's timer) so the model stops generating. An answer that ends on its own is
//! padded the same way. Measured in `docs/cut-matrix.md`. A stream whose clients read any line
//! but a blank one as data is padded with blank lines instead, and an AWS event stream with whole
//! messages of an event type no SDK knows ([`Padding`], its framing's or format's choice).

/// The longest padding unit: `:`, dots, and a blank line. Each comment ends with a blank line so
/// clients that gather lines until one (the Anthropic SDK's decoder) never pile up the padding.
const LINE: usize = 1024;

/// What fills a frame once its stream is over: lines its clients skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// SSE comment lines of up to [`LINE`] bytes: few lines for a client to read.
    Comments,
    /// Blank lines alone (`\n`), for clients that read every other line as data, comments too.
    BlankLines,
    /// AWS event-stream messages of the event type [`PADDING_EVENT`], which no service model
    /// declares: botocore's `EventStream` skips an event it cannot name (`parsers.py`
    /// `BaseEventStreamParser._do_parse` leaves it empty, `eventstream.py` yields only what is
    /// not), and the AWS SDK for JavaScript drops an `$unknown` event (smithy
    /// `eventstream-serde-universal` `getMessageUnmarshaller`). Each message is at least
    /// [`EVENT_STREAM_FLOOR`] bytes, so a frame keeps that much room beyond what it reserves.
    EventStream,
}

/// The event type of an event-stream padding message.
pub const PADDING_EVENT: &str = "livecheckPadding";

/// The smallest padding message: its headers (as [`crate::eventstream::encode_event`] writes
/// them: 102 bytes of framing with [`PADDING_EVENT`]) and the payload `{"p":""}`.
pub const EVENT_STREAM_FLOOR: usize = 110;

/// The largest padding message, well under any reader's limit (botocore takes 24 MiB payloads).
const EVENT_STREAM_MESSAGE: usize = 16 * 1024;

impl Padding {
    /// The room a frame padded this way keeps beyond what it reserves: the smallest padding it
    /// can write, so the frame never ends with room too small to pad.
    fn floor(self) -> usize {
        match self {
            Padding::Comments | Padding::BlankLines => 0,
            Padding::EventStream => EVENT_STREAM_FLOOR,
        }
    }
}

/// How many bytes of a framed stream went out, against the length its headers announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    length: usize,
    sent: usize,
    padding: Padding,
}

impl Frame {
    pub fn new(length: usize) -> Self {
        Self {
            length,
            sent: 0,
            padding: Padding::Comments,
        }
    }

    /// The same frame, padded with `padding`.
    pub fn padded_with(self, padding: Padding) -> Self {
        Self { padding, ..self }
    }

    /// The `content-length` the response headers announce.
    pub fn length(&self) -> usize {
        self.length
    }

    /// Whether `more` bytes, plus `reserve` kept for closing events (and the padding's floor),
    /// still fit.
    pub fn fits(&self, more: usize, reserve: usize) -> bool {
        self.sent
            .checked_add(more)
            .and_then(|n| n.checked_add(reserve))
            .and_then(|n| n.checked_add(self.padding.floor()))
            .is_some_and(|n| n <= self.length)
    }

    /// Records bytes sent.
    pub fn sent(&mut self, n: usize) {
        self.sent = self.sent.saturating_add(n);
    }

    /// Lines filling the frame to its length ([`Padding`]); records them as sent.
    pub fn pad(&mut self) -> Vec<u8> {
        let mut left = self.length.saturating_sub(self.sent);
        match self.padding {
            Padding::BlankLines => {
                self.sent(left);
                return vec![b'\n'; left];
            }
            Padding::EventStream => {
                let out = event_stream_padding(left);
                self.sent(out.len());
                return out;
            }
            Padding::Comments => {}
        }
        let mut out = Vec::with_capacity(left);
        while left > 0 {
            let line = left.min(LINE);
            match line {
                // Lone newlines are empty lines: they end an event with no data, which SSE
                // clients skip.
                1 | 2 => out.resize(out.len() + line, b'\n'),
                n => {
                    out.push(b':');
                    out.resize(out.len() + n - 3, b'.');
                    out.extend_from_slice(b"\n\n");
                }
            }
            left -= line;
        }
        self.sent(out.len());
        out
    }
}

/// Event-stream messages of [`PADDING_EVENT`] filling exactly `left` bytes; as many as fit when
/// `left` is under [`EVENT_STREAM_FLOOR`] (the frame's floor keeps that from happening).
fn event_stream_padding(mut left: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(left);
    while left >= EVENT_STREAM_FLOOR {
        let mut size = left.min(EVENT_STREAM_MESSAGE);
        if (1..EVENT_STREAM_FLOOR).contains(&(left - size)) {
            // Leave a whole message's room for the next one.
            size = left - EVENT_STREAM_FLOOR;
        }
        let mut payload = Vec::with_capacity(size - EVENT_STREAM_FLOOR + 8);
        payload.extend_from_slice(b"{\"p\":\"");
        payload.resize(payload.len() + size - EVENT_STREAM_FLOOR, b'.');
        payload.extend_from_slice(b"\"}");
        let before = out.len();
        if crate::eventstream::encode_event(&mut out, PADDING_EVENT, &payload).is_err() {
            break;
        }
        left = left.saturating_sub(out.len() - before);
    }
    out
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn padding_fills_the_frame_exactly_with_comment_lines() {
        for (length, sent) in [
            (4096, 100),
            (10, 6),
            (10, 7),
            (10, 8),
            (10, 9),
            (10, 10),
            (3000, 0),
        ] {
            let mut frame = Frame::new(length);
            frame.sent(sent);
            let pad = frame.pad();
            assert_eq!(pad.len(), length - sent, "{length} {sent}");
            let text = std::str::from_utf8(&pad).unwrap();
            assert!(
                text.lines().all(|l| l.is_empty() || l.starts_with(':')),
                "{text:?}"
            );
            assert!(pad.is_empty() || pad.ends_with(b"\n"));
            assert!(
                !text.contains(".\n:"),
                "every comment is its own event: {text:?}"
            );
            assert!(frame.pad().is_empty(), "a full frame pads nothing more");
        }
    }

    #[test]
    fn blank_line_padding_fills_the_frame_exactly_with_blank_lines_alone() {
        for (length, sent) in [(4096, 100), (10, 9), (10, 10), (3000, 0)] {
            let mut frame = Frame::new(length).padded_with(Padding::BlankLines);
            frame.sent(sent);
            let pad = frame.pad();
            assert_eq!(pad.len(), length - sent, "{length} {sent}");
            assert!(pad.iter().all(|b| *b == b'\n'), "{pad:?}");
            assert!(frame.pad().is_empty(), "a full frame pads nothing more");
        }
    }

    #[test]
    fn event_stream_padding_fills_the_frame_exactly_with_messages_no_sdk_names() {
        for (length, sent) in [
            (4096, 100),
            (4096, 4096 - 110),
            (4096, 4096 - 111),
            (4096, 4096 - 219),
            (4096, 4096 - 220),
            (100_000, 7),
            (16 * 1024 + 50, 0),
            (4096, 4096),
        ] {
            let mut frame = Frame::new(length).padded_with(Padding::EventStream);
            frame.sent(sent);
            let pad = frame.pad();
            assert_eq!(pad.len(), length - sent, "{length} {sent}");
            let mut messages = Vec::new();
            let mut decoder = crate::eventstream::Decoder::new(pad.len().max(16));
            decoder.push(&pad, &mut messages).expect("whole messages");
            decoder.finish().expect("no message cut short");
            assert!(messages
                .iter()
                .all(|m| m.event_type() == Some(PADDING_EVENT)
                    && m.message_type() == Some("event")
                    && serde_json::from_slice::<serde_json::Value>(&m.payload).is_ok()));
            assert!(frame.pad().is_empty(), "a full frame pads nothing more");
        }
    }

    #[test]
    fn an_event_stream_frame_keeps_room_for_one_padding_message() {
        let mut frame = Frame::new(1000).padded_with(Padding::EventStream);
        frame.sent(600);
        assert!(frame.fits(290, 0));
        assert!(!frame.fits(291, 0), "110 bytes stay for a padding message");
        let mut frame = Frame::new(1000);
        frame.sent(600);
        assert!(frame.fits(400, 0), "SSE padding needs no room of its own");
    }

    #[test]
    fn fits_keeps_room_for_the_closing_events() {
        let mut frame = Frame::new(100);
        frame.sent(60);
        assert!(frame.fits(30, 10));
        assert!(!frame.fits(31, 10));
        assert!(!frame.fits(usize::MAX, 1));
    }
}
