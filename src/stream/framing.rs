//! How a vendor frames the events of a streamed answer: server-sent events for most, other framings
//! beside them. One decoder per stream, chosen by its [`Format`](super::format::Format); each
//! framing hands the rewriter [`sse::Event`]s (a name and the data), so a vendor's reader reads
//! events the same way whatever frames them.

use crate::eventstream;
use crate::frame::Padding;
use crate::jsonarray;
use crate::sse;

/// A stream's decoder.
#[derive(Debug, Clone)]
pub(crate) enum Framing {
    /// Server-sent events: `event:` and `data:` lines, events ended by a blank line.
    Sse(sse::Decoder),
    /// AWS event-stream messages (Bedrock's `converse-stream`): each becomes an event named by its
    /// `:event-type`, its payload the data. An exception (`:message-type: exception`) is named
    /// `exception:` and its `:exception-type`; an error (`:message-type: error`) `error:` and its
    /// `:error-code`, its `:error-message` the data. `:` is in no event type, so neither is taken
    /// for an event.
    EventStream {
        decoder: eventstream::Decoder,
        messages: Vec<eventstream::Message>,
    },
    /// One JSON array of objects sent piece by piece (Gemini's `:streamGenerateContent` without
    /// `alt=sse`): each element an event without a name, its JSON text as it came the data; the
    /// array's end an event named [`ARRAY_END`] without data, so that its format writes the end
    /// where the stream's events put it.
    JsonArray {
        decoder: jsonarray::Decoder,
        items: Vec<jsonarray::Item>,
    },
}

/// The name the end of a JSON array is read under ([`Framing::JsonArray`]).
pub(crate) const ARRAY_END: &str = "]";

/// The name an AWS exception message is read under ([`Framing::EventStream`]).
pub(crate) const EXCEPTION: &str = "exception:";
/// The name an AWS error message is read under ([`Framing::EventStream`]).
pub(crate) const ERROR: &str = "error:";

/// Whether `name` is an exception's or an error's, as [`Framing::EventStream`] names them.
pub(crate) fn is_exception(name: Option<&str>) -> bool {
    name.is_some_and(|n| n.starts_with(EXCEPTION) || n.starts_with(ERROR))
}

/// An exception or an error read from the upstream, written again as the message it came as:
/// an exception its type and JSON payload, an error its code and message. Nothing is appended
/// for another name, nor for what cannot be framed (over 4 GiB: never under the policy's limit).
pub(crate) fn write_exception(name: &str, data: &str, out: &mut Vec<u8>) {
    let _ = if let Some(kind) = name.strip_prefix(EXCEPTION) {
        eventstream::encode_exception(out, kind, data.as_bytes())
    } else if let Some(code) = name.strip_prefix(ERROR) {
        eventstream::encode(
            out,
            &[
                (eventstream::MESSAGE_TYPE, "error"),
                (eventstream::ERROR_CODE, code),
                (eventstream::ERROR_MESSAGE, data),
            ],
            b"",
        )
    } else {
        Ok(())
    };
}

/// The bytes cannot be read in the stream's framing. Never quotes the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadFraming;

impl Framing {
    /// Server-sent events, no line (and no event's data) longer than `limit` bytes.
    pub(crate) fn sse(limit: usize) -> Self {
        Self::Sse(sse::Decoder::new(limit))
    }

    /// AWS event-stream messages, none longer than `limit` bytes in all.
    pub(crate) fn event_stream(limit: usize) -> Self {
        Self::EventStream {
            decoder: eventstream::Decoder::new(limit),
            messages: Vec::new(),
        }
    }

    /// One JSON array of objects, no element longer than `limit` bytes.
    pub(crate) fn json_array(limit: usize) -> Self {
        Self::JsonArray {
            decoder: jsonarray::Decoder::new(limit),
            items: Vec::new(),
        }
    }

    /// Reads up to the end of the first event `bytes` completes, into `out`; returns how many of
    /// `bytes` it read (all of them when no event completes). The same events come out however
    /// the stream is split.
    pub(crate) fn push_event(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<sse::Event>,
    ) -> Result<usize, BadFraming> {
        match self {
            Self::Sse(d) => d.push_event(bytes, out).map_err(|_| BadFraming),
            Self::EventStream { decoder, messages } => {
                let read = decoder
                    .push_message(bytes, messages)
                    .map_err(|_| BadFraming)?;
                for message in messages.drain(..) {
                    out.push(as_event(message)?);
                }
                Ok(read)
            }
            Self::JsonArray { decoder, items } => {
                let read = decoder.push_item(bytes, items).map_err(|_| BadFraming)?;
                out.extend(items.drain(..).map(|item| match item {
                    jsonarray::Item::Element(data) => sse::Event { event: None, data },
                    jsonarray::Item::End => sse::Event {
                        event: Some(ARRAY_END.to_owned()),
                        data: String::new(),
                    },
                }));
                Ok(read)
            }
        }
    }

    /// The end of the stream: a last event, or an error when the stream ended inside one.
    pub(crate) fn finish(&mut self, out: &mut Vec<sse::Event>) -> Result<(), BadFraming> {
        match self {
            Self::Sse(d) => d.finish(out).map_err(|_| BadFraming),
            Self::EventStream { decoder, .. } => decoder.finish().map_err(|_| BadFraming),
            Self::JsonArray { decoder, .. } => decoder.finish().map_err(|_| BadFraming),
        }
    }

    /// The SSE decoder, for the short path that reads a text event's data line in place; `None`
    /// for any other framing, whose every event goes through the general path.
    /// What pads a length frame of this framing, when the framing decides it: whole AWS
    /// event-stream messages, or blank lines after a JSON array (whitespace JSON allows); `None`
    /// for SSE, where the vendor's format decides ([`crate::stream::format::Format::padding`]).
    pub(crate) fn padding(&self) -> Option<Padding> {
        match self {
            Self::Sse(_) => None,
            Self::EventStream { .. } => Some(Padding::EventStream),
            Self::JsonArray { .. } => Some(Padding::BlankLines),
        }
    }

    pub(crate) fn as_sse(&self) -> Option<&sse::Decoder> {
        match self {
            Self::Sse(d) => Some(d),
            Self::EventStream { .. } | Self::JsonArray { .. } => None,
        }
    }
}

/// An event-stream message as an event: named as [`Framing::EventStream`] says; a message of
/// another type, without its type's name, or whose payload is not UTF-8 cannot be read.
fn as_event(message: eventstream::Message) -> Result<sse::Event, BadFraming> {
    let name = match message.message_type() {
        Some("event") => message.event_type().map(str::to_owned),
        Some("exception") => message.exception_type().map(|t| format!("{EXCEPTION}{t}")),
        Some("error") => message
            .string(eventstream::ERROR_CODE)
            .map(|c| format!("{ERROR}{c}")),
        _ => None,
    }
    .ok_or(BadFraming)?;
    let data = if name.starts_with(ERROR) {
        message
            .string(eventstream::ERROR_MESSAGE)
            .unwrap_or_default()
            .to_owned()
    } else {
        String::from_utf8(message.payload).map_err(|_| BadFraming)?
    };
    Ok(sse::Event {
        event: Some(name),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(framing: &mut Framing, mut bytes: &[u8]) -> Result<Vec<sse::Event>, BadFraming> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let read = framing.push_event(bytes, &mut out)?;
            bytes = bytes.get(read..).unwrap_or_default();
        }
        framing.finish(&mut out)?;
        Ok(out)
    }

    #[test]
    fn event_stream_messages_are_events_named_by_type_exceptions_and_errors_apart() {
        let mut stream = Vec::new();
        eventstream::encode_event(&mut stream, "messageStart", br#"{"role":"assistant"}"#)
            .expect("frames");
        eventstream::encode_exception(&mut stream, "throttlingException", br#"{"message":"slow"}"#)
            .expect("frames");
        eventstream::encode(
            &mut stream,
            &[
                (":message-type", "error"),
                (":error-code", "InternalFailure"),
                (":error-message", "broke"),
            ],
            b"",
        )
        .expect("frames");
        let want = vec![
            sse::Event {
                event: Some("messageStart".into()),
                data: r#"{"role":"assistant"}"#.into(),
            },
            sse::Event {
                event: Some("exception:throttlingException".into()),
                data: r#"{"message":"slow"}"#.into(),
            },
            sse::Event {
                event: Some("error:InternalFailure".into()),
                data: "broke".into(),
            },
        ];
        for size in [1, 7, stream.len()] {
            let mut framing = Framing::event_stream(1 << 16);
            let mut out = Vec::new();
            for chunk in stream.chunks(size) {
                let mut rest = chunk;
                while !rest.is_empty() {
                    let read = framing.push_event(rest, &mut out).expect("reads");
                    rest = rest.get(read..).unwrap_or_default();
                }
            }
            framing.finish(&mut out).expect("ends on a message");
            assert_eq!(out, want, "chunks of {size}");
        }
    }

    #[test]
    fn a_json_array_is_its_elements_then_its_end_under_every_split_and_nothing_else_reads() {
        let stream = "[{\"a\": \"]},\\\"\"}\n,\r\n{\"b\": [1]}\n]";
        let element = |data: &str| sse::Event {
            event: None,
            data: data.into(),
        };
        let want = vec![
            element("{\"a\": \"]},\\\"\"}"),
            element("{\"b\": [1]}"),
            sse::Event {
                event: Some(ARRAY_END.into()),
                data: String::new(),
            },
        ];
        for size in 1..=stream.len() {
            let mut framing = Framing::json_array(1 << 16);
            let mut out = Vec::new();
            for chunk in stream.as_bytes().chunks(size) {
                let mut rest = chunk;
                while !rest.is_empty() {
                    let read = framing.push_event(rest, &mut out).expect("reads");
                    rest = rest.get(read..).unwrap_or_default();
                }
            }
            framing.finish(&mut out).expect("ends on the array's end");
            assert_eq!(out, want, "chunks of {size}");
        }
        for bad in ["", "data: {}\n\n", "[{}", "[{}] x", "[7]", "x[{}]"] {
            assert_eq!(
                read_all(&mut Framing::json_array(1 << 16), bad.as_bytes()),
                Err(BadFraming),
                "{bad:?}"
            );
        }
        assert_eq!(
            read_all(&mut Framing::json_array(4), b"[{\"a\":1}]"),
            Err(BadFraming),
            "an element over the limit"
        );
    }

    #[test]
    fn a_message_without_its_types_name_or_with_a_payload_not_utf8_is_bad_framing() {
        for (headers, payload) in [
            (vec![(":message-type", "event")], b"{}".as_slice()),
            (vec![(":event-type", "x")], b"{}".as_slice()),
            (
                vec![(":message-type", "event"), (":event-type", "x")],
                b"\xff".as_slice(),
            ),
        ] {
            let mut stream = Vec::new();
            eventstream::encode(&mut stream, &headers, payload).expect("frames");
            let got = read_all(&mut Framing::event_stream(1 << 16), &stream);
            assert_eq!(got, Err(BadFraming), "{headers:?}");
        }
        let mut stream = Vec::new();
        eventstream::encode_event(&mut stream, "messageStop", b"{}").expect("frames");
        stream.pop();
        assert_eq!(
            read_all(&mut Framing::event_stream(1 << 16), &stream),
            Err(BadFraming),
            "a stream ending inside a message"
        );
    }

    #[test]
    fn exceptions_and_errors_are_written_as_they_came() {
        let mut out = Vec::new();
        write_exception(
            "exception:modelStreamErrorException",
            r#"{"message":"m"}"#,
            &mut out,
        );
        write_exception("error:InternalFailure", "broke", &mut out);
        write_exception("ping", "{}", &mut out);
        let mut read = Vec::new();
        let mut decoder = eventstream::Decoder::new(1 << 16);
        decoder.push(&out, &mut read).expect("frames");
        decoder.finish().expect("whole messages");
        assert_eq!(read.len(), 2, "nothing for another name");
        assert_eq!(read[0].exception_type(), Some("modelStreamErrorException"));
        assert_eq!(read[0].payload, br#"{"message":"m"}"#);
        assert_eq!(read[1].message_type(), Some("error"));
        assert_eq!(
            read[1].string(eventstream::ERROR_CODE),
            Some("InternalFailure")
        );
        assert_eq!(read[1].string(eventstream::ERROR_MESSAGE), Some("broke"));
        assert!(is_exception(Some("exception:x")) && is_exception(Some("error:y")));
        assert!(!is_exception(Some("ping")) && !is_exception(None));
    }
}
