//! Server-sent events: an incremental decoder that survives any chunk split, and the encoder.
//!
//! Reference: <https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>.
//! Bytes are cut into lines before any decoding, so a chunk that ends inside a UTF-8 character or
//! between `\r` and `\n` is never mangled; only a complete line is decoded. `id` and `retry` fields
//! are dropped (no vendor this filter reads uses them), as are comments (`: keep-alive`).

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field, when the event had one.
    pub event: Option<String>,
    /// The `data:` lines joined with `"\n"`.
    pub data: String,
}

/// Why a stream cannot be read. Never quotes the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseError {
    /// A line, or an event's data, is longer than the decoder's limit.
    TooLong,
    /// A complete line is not UTF-8.
    NotUtf8,
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLong => f.write_str("an event stream line is longer than the limit"),
            Self::NotUtf8 => f.write_str("an event stream line is not UTF-8"),
        }
    }
}

impl std::error::Error for SseError {}

/// Decodes an event stream pushed in chunks of any size.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// The incomplete line (bytes, not yet decoded).
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` that starts the next one ends nothing.
    after_cr: bool,
    /// Nothing decoded yet: a leading byte order mark is skipped.
    at_start: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    limit: usize,
}

impl Decoder {
    /// A decoder refusing any line (and any event's data) longer than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            event: None,
            data: String::new(),
            has_data: false,
            limit,
        }
    }

    /// Feeds a chunk; appends every event it completes to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Event>) -> Result<(), SseError> {
        self.read(bytes, out, false).map(|_| ())
    }

    /// [`Self::push`] up to the end of the first event it completes: how many bytes of `bytes` it
    /// read (all of them when it completed none). The rest is for a later push; the events are
    /// the same however a stream is split.
    pub fn push_event(&mut self, bytes: &[u8], out: &mut Vec<Event>) -> Result<usize, SseError> {
        self.read(bytes, out, true)
    }

    fn read(&mut self, chunk: &[u8], out: &mut Vec<Event>, one: bool) -> Result<usize, SseError> {
        let mut bytes = chunk;
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) {
            let (head, tail) = bytes.split_at(end);
            let (cr, tail) = match tail.split_first() {
                Some((&b, rest)) => (b == b'\r', rest),
                None => (false, tail),
            };
            bytes = tail;
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = bytes.get(1..).unwrap_or_default(),
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let dispatched = out.len();
            if self.line.is_empty() {
                // The whole line is in this chunk: read in place, not copied.
                self.fits(head)?;
                self.line_done(head, out)?;
            } else {
                self.extend_line(head)?;
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, out)?;
            }
            if one && out.len() > dispatched {
                return Ok(chunk.len() - bytes.len());
            }
        }
        self.extend_line(bytes)?;
        Ok(chunk.len())
    }

    /// Where an event of one data line would begin, in the shape most streams write
    /// (`data: <line>\n\n`, or `event: <name>\n` before it for a named event): when nothing of
    /// an earlier event is pending and `bytes` starts so, the bytes after the `data: ` prefix
    /// (the line, then the rest) and the length of the `event:` line before it (0 for a nameless
    /// event). A reader that reads the line's data from there and knows where it ends asks
    /// [`Self::data_event`] for the event.
    pub fn data_line<'a>(&self, bytes: &'a [u8], name: Option<&str>) -> Option<(&'a [u8], usize)> {
        let idle = self.line.is_empty()
            && !self.after_cr
            && !self.at_start
            && self.event.is_none()
            && !self.has_data;
        if !idle {
            return None;
        }
        let data = match name {
            None => bytes,
            Some(name) => bytes
                .strip_prefix(b"event: ")?
                .strip_prefix(name.as_bytes())?
                .strip_prefix(b"\n")?,
        };
        Some((data.strip_prefix(b"data: ")?, bytes.len() - data.len()))
    }

    /// The event whose data is the first `data_len` bytes of `line` ([`Self::data_line`]'s),
    /// bytes the caller read as one line's data (no `\n` or `\r` in them): its data and its
    /// length in bytes from the `data: ` prefix on, when the blank line follows at once and the
    /// line is within the limit. Pushing those bytes (after the `event:` line, if any) would
    /// dispatch exactly `Event { event, data }` (`event` the name `data_line` was given) when the
    /// data is UTF-8 (and fail with
    /// [`SseError::NotUtf8`] when not: a reader taking the event from here checks that), and
    /// leave the decoder as it is, so a reader may take the event from here and push only what
    /// follows it. `None` otherwise: push it.
    pub fn data_event<'a>(&self, line: &'a [u8], data_len: usize) -> Option<(&'a [u8], usize)> {
        let (data, after) = line.split_at_checked(data_len)?;
        if !after.starts_with(b"\n\n") || data_len.checked_add(6)? > self.limit {
            return None;
        }
        Some((data, data_len + 8))
    }

    /// The end of the stream: an event not followed by a blank line is still dispatched.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> Result<(), SseError> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
        }
        self.line_done(b"", out)
    }

    /// Whether the line so far and `bytes` stay within the limit.
    fn fits(&self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len().saturating_add(bytes.len()) > self.limit {
            return Err(SseError::TooLong);
        }
        Ok(())
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        self.fits(bytes)?;
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<Event>) -> Result<(), SseError> {
        let mut line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if std::mem::take(&mut self.at_start) {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                out.push(Event {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            } else {
                self.event = None;
            }
            return Ok(());
        }
        // The field name is a few bytes: a byte search, not a `char` pattern's set-up.
        let colon = line.bytes().position(|b| b == b':');
        let (field, value) = match colon.and_then(|at| line.split_at_checked(at)) {
            Some((field, rest)) => {
                let value = rest.get(1..).unwrap_or_default();
                (field, value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                let extra = value.len() + usize::from(self.has_data);
                if self.data.len().saturating_add(extra) > self.limit {
                    return Err(SseError::TooLong);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // Comments (empty field name), `id`, `retry` and unknown fields.
            _ => {}
        }
        Ok(())
    }
}

/// Appends one event: an `event:` line when named, one `data:` line per line of `data`, and the
/// blank line that dispatches it.
pub fn encode(out: &mut Vec<u8>, event: Option<&str>, data: &str) {
    out.reserve(event.map_or(0, |e| e.len() + 8) + data.len() + 8);
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    // JSON data is one line (a newline in it is escaped): no search for line ends in it.
    if memchr::memchr(b'\n', data.as_bytes()).is_none() {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(data.as_bytes());
        out.extend_from_slice(b"\n\n");
        return;
    }
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {

    use super::*;

    fn decode_in(chunks: &[&[u8]]) -> Result<Vec<Event>, SseError> {
        let mut decoder = Decoder::new(1024);
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk, &mut out)?;
        }
        decoder.finish(&mut out)?;
        Ok(out)
    }

    fn ev(event: Option<&str>, data: &str) -> Event {
        Event {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    const STREAM: &[u8] = "\u{feff}: hello\r\nevent: a\r\ndata: {\"t\": \"é日本😀\"}\r\n\r\nid: 3\nretry: 10\ndata:x\ndata\ndata:  y\n\nevent: lonely\n\ndata: last\rdata: cr\r\r".as_bytes();

    #[test]
    fn every_split_of_a_stream_gives_the_same_events() {
        let whole = decode_in(&[STREAM]).unwrap();
        assert_eq!(
            whole,
            vec![
                ev(Some("a"), "{\"t\": \"é日本😀\"}"),
                ev(None, "x\n\n y"),
                ev(None, "last\ncr"),
            ]
        );
        for i in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(i);
            assert_eq!(decode_in(&[a, b]).unwrap(), whole, "split at {i}");
        }
        let bytes: Vec<&[u8]> = STREAM.chunks(1).flat_map(|b| [b, &b""[..]]).collect();
        assert_eq!(decode_in(&bytes).unwrap(), whole);
        // An event at a time: each push stops where its event ended, the rest pushed after.
        for i in 0..=STREAM.len() {
            let mut decoder = Decoder::new(1024);
            let mut out = Vec::new();
            for chunk in [&STREAM[..i], &STREAM[i..]] {
                let mut rest = chunk;
                while !rest.is_empty() {
                    let before = out.len();
                    let read = decoder.push_event(rest, &mut out).unwrap();
                    assert!(out.len() - before <= 1, "split at {i}");
                    assert!(read > 0 && (read == rest.len() || out.len() > before));
                    rest = &rest[read..];
                }
            }
            decoder.finish(&mut out).unwrap();
            assert_eq!(out, whole, "split at {i}, an event at a time");
        }
    }

    #[test]
    fn a_last_event_without_a_blank_line_is_dispatched_at_the_end() {
        assert_eq!(
            decode_in(&[b"event: e\ndata: 1"]).unwrap(),
            vec![ev(Some("e"), "1")]
        );
        assert_eq!(
            decode_in(&[b"data: [DONE]\n"]).unwrap(),
            vec![ev(None, "[DONE]")]
        );
    }

    #[test]
    fn an_empty_data_line_still_dispatches() {
        assert_eq!(decode_in(&[b"data:\n\n"]).unwrap(), vec![ev(None, "")]);
    }

    #[test]
    fn invalid_utf8_in_a_complete_line_is_an_error() {
        assert_eq!(decode_in(&[b"data: \xff\n\n"]), Err(SseError::NotUtf8));
    }

    #[test]
    fn lines_and_events_are_bounded() {
        let mut decoder = Decoder::new(16);
        let mut out = Vec::new();
        assert_eq!(decoder.push(&[b'a'; 17], &mut out), Err(SseError::TooLong));
        let mut decoder = Decoder::new(16);
        let many = b"data: 0123456789\ndata: 0123456789\n\n";
        assert_eq!(decoder.push(many, &mut out), Err(SseError::TooLong));
    }

    /// The event `data_line` and `data_event` give for `bytes`, its line's data read as a
    /// reader would (up to the first line end), and the event's length in all.
    fn whole_data_event<'a>(
        decoder: &Decoder,
        bytes: &'a [u8],
        name: Option<&str>,
    ) -> Option<(&'a [u8], usize)> {
        let (line, named) = decoder.data_line(bytes, name)?;
        let end = line.iter().position(|&b| b == b'\n' || b == b'\r')?;
        decoder
            .data_event(line, end)
            .map(|(data, n)| (data, named + n))
    }

    #[test]
    fn a_whole_data_event_is_what_pushing_it_dispatches() {
        let long = format!("data: {}\n\n", "x".repeat(30));
        let cases: [&[u8]; 19] = [
            b"data: {\"a\":1}\n\n",
            b"data: x\n\ndata: y\n\n",
            b"data:  space\n\n",
            b"data: \n\n",
            b"data: x\r\n\r\n",
            b"data:x\n\n",
            b"event: e\ndata: x\n\n",
            b"data: x\n",
            b"data: x\ndata: y\n\n",
            b"data: \xff\n\n",
            b": comment\n\n",
            long.as_bytes(),
            b"event: e\ndata: {\"b\":2}\n\nevent: e\ndata: y\n\n",
            b"event:e\ndata: x\n\n",
            b"event: e\r\ndata: x\n\n",
            b"event: ee\ndata: x\n\n",
            b"event: e\ndata: x\n",
            b"event: e\n\ndata: x\n\n",
            b"event: e\ndata: \xff\n\n",
        ];
        let mut decoder = Decoder::new(32);
        let mut out = Vec::new();
        decoder.push(b"data: first\n\n", &mut out).unwrap();
        for name in [None, Some("e")] {
            for bytes in cases {
                let mut pushed = decoder.clone();
                let mut events = Vec::new();
                let all = pushed.push(bytes, &mut events);
                let Some((data, n)) = whole_data_event(&decoder, bytes, name) else {
                    continue;
                };
                let (taken, rest) = bytes.split_at(n);
                let mut taking = decoder.clone();
                let mut first = Vec::new();
                let Ok(data) = std::str::from_utf8(data) else {
                    assert_eq!(taking.push(taken, &mut first), Err(SseError::NotUtf8));
                    continue;
                };
                taking.push(taken, &mut first).unwrap();
                assert_eq!(first, vec![ev(name, data)], "{bytes:?}");
                // What follows decodes as it would have: the decoder was left as it was.
                let mut then = Vec::new();
                let after = decoder.clone().push(rest, &mut then);
                first.extend(then);
                assert_eq!((all, events), (after, first), "{bytes:?}");
            }
        }
        let taken = |name| -> Vec<&[u8]> {
            cases
                .iter()
                .filter_map(|b| whole_data_event(&decoder, b, name))
                .map(|(data, _)| data)
                .collect()
        };
        let expected: [&[u8]; 5] = [b"{\"a\":1}", b"x", b" space", b"", b"\xff"];
        assert_eq!(taken(None), expected);
        // Named: only `event: <the name>` then a data line, each ended by `\n` alone.
        let expected: [&[u8]; 3] = [b"x", b"{\"b\":2}", b"\xff"];
        assert_eq!(taken(Some("e")), expected);
        // Not at the stream's start (a byte order mark), nor with a line or an event pending.
        assert_eq!(Decoder::new(32).data_line(b"data: x\n\n", None), None);
        let mut pending = decoder.clone();
        pending.push(b"data: a\n", &mut out).unwrap();
        assert_eq!(pending.data_line(b"data: x\n\n", None), None);
        let mut pending = decoder.clone();
        pending.push(b"dat", &mut out).unwrap();
        assert_eq!(pending.data_line(b"data: x\n\n", None), None);
        let mut pending = decoder.clone();
        pending.push(b"event: e\n", &mut out).unwrap();
        assert_eq!(pending.data_line(b"data: x\n\n", None), None);
        assert_eq!(pending.data_line(b"event: e\ndata: x\n\n", Some("e")), None);
    }

    #[test]
    fn encoder_writes_what_the_decoder_reads() {
        let mut out = Vec::new();
        encode(
            &mut out,
            Some("message_stop"),
            "{\"type\":\"message_stop\"}",
        );
        encode(&mut out, None, "two\nlines");
        assert_eq!(
            out,
            b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\ndata: two\ndata: lines\n\n"
        );
        assert_eq!(
            decode_in(&[&out]).unwrap(),
            vec![
                ev(Some("message_stop"), "{\"type\":\"message_stop\"}"),
                ev(None, "two\nlines"),
            ]
        );
    }
}
