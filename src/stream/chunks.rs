//! Bedrock's `invoke-with-response-stream` (`POST /model/{modelId}/invoke-with-response-stream`):
//! the model's own stream events (for Anthropic's models, the Messages events, without their SSE
//! framing), each one base64-encoded in the JSON payload of an AWS event-stream message of
//! `:event-type: chunk`: `{"bytes":"<base64 of the event's JSON>","p":"abcd…"}`.
//!
//! Reading: a chunk's payload is its event ([`read_chunk`]), named by the event's `type` as the
//! Anthropic SDK names it (`anthropic/lib/bedrock/_stream_decoder.py`, `_chunk_bytes_to_sse`).
//! Writing: what a format writes for the caller as server-sent events goes out again as chunk
//! messages ([`reframe`]): the format writes its own events and never knows how they are carried.
//!
//! Vendor facts: botocore's bedrock-runtime service model (`service-2.json`, 2023-09-30):
//! `InvokeModelWithResponseStreamResponse.body` is the event stream `ResponseStream`, whose
//! `chunk` member is a `PayloadPart { bytes: PartBody }` (a blob, base64 in JSON, at most
//! 1,000,000 bytes) and whose other members are exceptions (`internalServerException`,
//! `modelStreamErrorException`, `validationException`, `throttlingException`,
//! `modelTimeoutException`, `serviceUnavailableException`). <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModelWithResponseStream.html>,
//! <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_PayloadPart.html>.
//! Bedrock also writes `"p"`, a padding of random length (a prefix of `a…zA…Z0…9`) that the
//! model does not declare and botocore ignores: it hides each event's length from whoever
//! watches the encrypted stream. An event that goes out as it came keeps its padding; one
//! livecheck wrote (a text split at a hold, its closing events) is padded to a multiple of
//! [`PAD_TO`] characters.

use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde::Deserialize;

use crate::{base64, eventstream, sse};

/// The content type of an AWS event stream (Bedrock's response header).
pub(crate) const CONTENT_TYPE: &str = crate::eventstream::MEDIA_TYPE;
/// The `:event-type` of a message that carries one of the model's events.
pub(crate) const CHUNK: &str = "chunk";

/// The padding's characters, as Bedrock writes them (a prefix of these).
const PAD: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/// A chunk livecheck writes has its `bytes` and padding together a multiple of this long.
const PAD_TO: usize = 32;
/// The most paddings remembered of events read and not yet written (a stream whose every text
/// event is rewritten keeps no more than these).
const MAX_PADS: usize = 64;

/// A chunk's payload cannot be read. Never quotes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadChunk;

/// `PayloadPart` in JSON. Other members are ignored, as botocore ignores them; a member twice is
/// an error (serde refuses a duplicate field), so no reader takes another `bytes` than this one.
#[derive(Deserialize)]
struct PayloadPart {
    bytes: String,
    p: Option<String>,
}

/// The event's JSON's `type`.
#[derive(Deserialize)]
struct Typed {
    #[serde(rename = "type")]
    kind: String,
}

/// A chunk's payload: the event it carries (UTF-8 JSON, named by its `type`), and its padding.
pub(crate) fn read_chunk(payload: &str) -> Result<(sse::Event, Option<String>), BadChunk> {
    let part: PayloadPart = serde_json::from_str(payload).map_err(|_| BadChunk)?;
    let bytes = base64::decode(&part.bytes).map_err(|_| BadChunk)?;
    let data = String::from_utf8(bytes).map_err(|_| BadChunk)?;
    // An event without a string `type` names nothing the Anthropic SDK reads (it skips it):
    // unreadable here, never passed unread.
    let typed: Typed = serde_json::from_str(&data).map_err(|_| BadChunk)?;
    Ok((
        sse::Event {
            event: Some(typed.kind),
            data,
        },
        part.p,
    ))
}

/// The paddings of the events read and not yet written, oldest first, by a hash of the event.
#[derive(Debug, Default)]
pub(crate) struct Pads {
    read: VecDeque<(u64, Option<String>)>,
}

fn hash_of(data: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    data.hash(&mut hasher);
    hasher.finish()
}

impl Pads {
    /// An event was read with this padding.
    pub(crate) fn read(&mut self, data: &str, pad: Option<String>) {
        if self.read.len() >= MAX_PADS {
            self.read.pop_front();
        }
        self.read.push_back((hash_of(data), pad));
    }

    /// The padding of an event written with `data` whose `bytes` are `encoded` long: the one it
    /// came with when it goes as it came (and the events read before it, not written as they
    /// came, are forgotten), else one of livecheck's.
    fn take(&mut self, data: &str, encoded: usize) -> Option<String> {
        let hash = hash_of(data);
        if let Some(at) = self.read.iter().position(|(h, _)| *h == hash) {
            let mut pad = None;
            for _ in 0..=at {
                pad = self.read.pop_front().map(|(_, p)| p);
            }
            return pad.flatten();
        }
        let len = PAD_TO - encoded % PAD_TO;
        Some(PAD.chars().cycle().take(len).collect())
    }

    /// The stream ended for the caller: nothing more is written.
    pub(crate) fn clear(&mut self) {
        self.read.clear();
    }
}

/// Server-sent events (a format's writing) as chunk messages, appended to `out`; the padding
/// of each from `pads`. Bytes that are not whole events (none a format writes) are dropped.
pub(crate) fn reframe(sse_bytes: &[u8], out: &mut Vec<u8>, pads: &mut Pads) {
    let mut decoder = sse::Decoder::new(usize::MAX);
    let mut events = Vec::new();
    if decoder.push(sse_bytes, &mut events).is_err() || decoder.finish(&mut events).is_err() {
        return;
    }
    for event in events {
        let mut bytes = String::new();
        base64::encode(event.data.as_bytes(), &mut bytes);
        let pad = pads.take(&event.data, bytes.len());
        let mut payload = String::with_capacity(bytes.len() + 64);
        payload.push_str(r#"{"bytes":""#);
        payload.push_str(&bytes);
        payload.push('"');
        if let Some(pad) = pad.and_then(|p| serde_json::to_string(&p).ok()) {
            payload.push_str(r#","p":"#);
            payload.push_str(&pad);
        }
        payload.push('}');
        // A payload over 4 GiB cannot be framed; none is (events are bounded by the policy).
        let _ = eventstream::encode_event(out, CHUNK, payload.as_bytes());
    }
}

/// [`reframe`] with no paddings read: what livecheck writes on its own (a refused question, a
/// recovered answer).
pub(crate) fn reframed(sse_bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sse_bytes.len() * 2);
    reframe(sse_bytes, &mut out, &mut Pads::default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk as Bedrock frames it.
    fn chunk(event: &str, pad: Option<&str>) -> Vec<u8> {
        let mut bytes = String::new();
        base64::encode(event.as_bytes(), &mut bytes);
        let payload = match pad {
            Some(p) => format!(r#"{{"bytes":"{bytes}","p":"{p}"}}"#),
            None => format!(r#"{{"bytes":"{bytes}"}}"#),
        };
        let mut out = Vec::new();
        eventstream::encode_event(&mut out, CHUNK, payload.as_bytes()).unwrap();
        out
    }

    fn messages(bytes: &[u8]) -> Vec<eventstream::Message> {
        let mut decoder = eventstream::Decoder::new(usize::MAX);
        let mut out = Vec::new();
        decoder.push(bytes, &mut out).unwrap();
        decoder.finish().unwrap();
        out
    }

    #[test]
    fn a_chunk_reads_as_its_event_named_by_its_type_and_its_padding() {
        let stop = r#"{"type":"message_stop"}"#;
        let message = messages(&chunk(stop, Some("abcdefgh"))).remove(0);
        let payload = String::from_utf8(message.payload).unwrap();
        let (event, pad) = read_chunk(&payload).unwrap();
        assert_eq!(event.event.as_deref(), Some("message_stop"));
        assert_eq!(event.data, stop);
        assert_eq!(pad.as_deref(), Some("abcdefgh"));
        // Members botocore does not model are ignored.
        let (event, pad) = read_chunk(r#"{"bytes":"eyJ0eXBlIjoicGluZyJ9","x":1}"#).unwrap();
        assert_eq!((event.data.as_str(), pad), (r#"{"type":"ping"}"#, None));
    }

    #[test]
    fn a_chunk_that_cannot_be_read_is_bad() {
        let b64 = |s: &str| {
            let mut out = String::new();
            base64::encode(s.as_bytes(), &mut out);
            out
        };
        for payload in [
            String::new(),
            "{}".into(),
            r#"{"p":"abc"}"#.into(),
            r#"{"bytes":1}"#.into(),
            r#"{"bytes":"eyJ0eXBlIjoicGluZyJ9 "}"#.into(),
            r#"{"bytes":"eyJ0eXBlIjoicGluZyJ9","bytes":"eyJ0eXBlIjoicGluZyJ9"}"#.into(),
            format!(r#"{{"bytes":"{}"}}"#, b64("not json")),
            format!(r#"{{"bytes":"{}"}}"#, b64(r#"{"completion":"legacy"}"#)),
            format!(r#"{{"bytes":"{}"}}"#, b64(r#"{"type":7}"#)),
            r#"{"bytes":"/w=="}"#.into(),
        ] {
            assert_eq!(read_chunk(&payload).err(), Some(BadChunk), "{payload}");
        }
    }

    #[test]
    fn an_event_written_as_it_came_keeps_its_frame_byte_for_byte() {
        let events = [
            (r#"{"type":"ping"}"#, Some("abcdefghijklmnopqrstuvwxyzABC")),
            (r#"{"type":"message_stop"}"#, None),
        ];
        let mut pads = Pads::default();
        let (mut sse_out, mut upstream) = (Vec::new(), Vec::new());
        for (data, pad) in events {
            pads.read(data, pad.map(str::to_owned));
            sse::encode(&mut sse_out, Some("x"), data);
            upstream.extend(chunk(data, pad));
        }
        let mut out = Vec::new();
        reframe(&sse_out, &mut out, &mut pads);
        assert_eq!(out, upstream);
        assert!(pads.read.is_empty());
    }

    #[test]
    fn an_event_livecheck_wrote_is_padded_to_a_multiple_and_reads_back() {
        let mut pads = Pads::default();
        pads.read(r#"{"type":"ping"}"#, Some("abc".into()));
        let mut sse_out = Vec::new();
        let data = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Pay to "}}"#;
        sse::encode(&mut sse_out, Some("content_block_delta"), data);
        let mut out = Vec::new();
        reframe(&sse_out, &mut out, &mut pads);
        let mut read = messages(&out);
        assert_eq!(read.len(), 1);
        let message = read.remove(0);
        assert_eq!(message.event_type(), Some(CHUNK));
        assert_eq!(message.message_type(), Some("event"));
        let part: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        let (bytes, pad) = (part["bytes"].as_str().unwrap(), part["p"].as_str().unwrap());
        assert_eq!((bytes.len() + pad.len()) % PAD_TO, 0);
        assert!(!pad.is_empty() && PAD.starts_with(pad));
        let (event, _) = read_chunk(std::str::from_utf8(&message.payload).unwrap()).unwrap();
        assert_eq!(event.data, data);
        assert_eq!(
            pads.read.len(),
            1,
            "the ping's padding is kept until it is written"
        );
    }

    #[test]
    fn paddings_remembered_are_bounded() {
        let mut pads = Pads::default();
        for i in 0..1000 {
            pads.read(&i.to_string(), Some("ab".into()));
        }
        assert_eq!(pads.read.len(), MAX_PADS);
    }
}
