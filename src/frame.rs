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
//! but a blank one as data is padded with blank lines instead ([`Padding`], its format's choice).

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

    /// Whether `more` bytes, plus `reserve` kept for closing events, still fit.
    pub fn fits(&self, more: usize, reserve: usize) -> bool {
        self.sent
            .checked_add(more)
            .and_then(|n| n.checked_add(reserve))
            .is_some_and(|n| n <= self.length)
    }

    /// Records bytes sent.
    pub fn sent(&mut self, n: usize) {
        self.sent = self.sent.saturating_add(n);
    }

    /// Lines filling the frame to its length ([`Padding`]); records them as sent.
    pub fn pad(&mut self) -> Vec<u8> {
        let mut left = self.length.saturating_sub(self.sent);
        if self.padding == Padding::BlankLines {
            self.sent(left);
            return vec![b'\n'; left];
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
    fn fits_keeps_room_for_the_closing_events() {
        let mut frame = Frame::new(100);
        frame.sent(60);
        assert!(frame.fits(30, 10));
        assert!(!frame.fits(31, 10));
        assert!(!frame.fits(usize::MAX, 1));
    }
}
