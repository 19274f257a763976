//! AWS event streams (`application/vnd.amazon.eventstream`): an incremental decoder that survives
//! any chunk split, and the encoder. Bedrock's `converse-stream` and `invoke-with-response-stream`
//! answer in this framing (`stream::framing`, `stream::chunks`).
//!
//! A message is a prelude (total length and headers length, u32 big-endian, then the CRC32 of
//! those 8 bytes), a block of headers (name length u8, name, value type u8, value), the payload,
//! and the CRC32 of everything before it. CRC32 is the IEEE polynomial (zlib's, Python's
//! `binascii.crc32`). Reference: botocore `botocore/eventstream.py` (the decoder boto3 runs) and
//! <https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html>. What cannot be
//! read (a checksum, a length out of bounds, a header past its block, an unknown value type, a
//! name given twice) is an error, never a guess; after one, every push answers the same error.

/// The prelude: total length, headers length, prelude CRC.
const PRELUDE: usize = 12;
/// The prelude and the message CRC: the length of a message with no headers and no payload.
const FRAME: usize = PRELUDE + 4;

/// The header naming an event's type (`contentBlockDelta`, `messageStop`, `chunk`...).
pub const EVENT_TYPE: &str = ":event-type";
/// The header saying what a message is: `event`, `exception` or `error`.
pub const MESSAGE_TYPE: &str = ":message-type";
/// The payload's media type (`application/json` for Bedrock's events and exceptions).
pub const CONTENT_TYPE: &str = ":content-type";
/// The header naming a modelled exception (`throttlingException`...) when `:message-type` is `exception`.
pub const EXCEPTION_TYPE: &str = ":exception-type";
/// The code of an unmodelled error, when `:message-type` is `error` (with `:error-message`).
pub const ERROR_CODE: &str = ":error-code";
/// The text of an unmodelled error.
pub const ERROR_MESSAGE: &str = ":error-message";

/// The media type of an HTTP body that is an event stream (Bedrock's `converse-stream` and
/// `invoke-with-response-stream` answers).
pub const MEDIA_TYPE: &str = "application/vnd.amazon.eventstream";

/// A header's value, by its wire type (0 to 9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Types 0 (true) and 1 (false): no bytes follow.
    Bool(bool),
    /// Type 2: one signed byte.
    Byte(i8),
    /// Type 3: i16 big-endian.
    Short(i16),
    /// Type 4: i32 big-endian.
    Int(i32),
    /// Type 5: i64 big-endian.
    Long(i64),
    /// Type 6: u16 big-endian length, then the bytes.
    Bytes(Vec<u8>),
    /// Type 7: u16 big-endian length, then UTF-8.
    String(String),
    /// Type 8: milliseconds since the Unix epoch, i64 big-endian.
    Timestamp(i64),
    /// Type 9: 16 bytes.
    Uuid([u8; 16]),
}

/// One header: its name and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub name: String,
    pub value: Value,
}

/// One decoded message: its headers in wire order (no name twice) and its payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    pub headers: Vec<Header>,
    pub payload: Vec<u8>,
}

impl Message {
    /// The value of the header `name`, when the message has it.
    pub fn header(&self, name: &str) -> Option<&Value> {
        self.headers
            .iter()
            .find(|h| h.name == name)
            .map(|h| &h.value)
    }

    /// The header `name` when its value is a string (`None` when absent or of another type).
    pub fn string(&self, name: &str) -> Option<&str> {
        match self.header(name)? {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// `:event-type`.
    pub fn event_type(&self) -> Option<&str> {
        self.string(EVENT_TYPE)
    }

    /// `:message-type`.
    pub fn message_type(&self) -> Option<&str> {
        self.string(MESSAGE_TYPE)
    }

    /// `:content-type`.
    pub fn content_type(&self) -> Option<&str> {
        self.string(CONTENT_TYPE)
    }

    /// `:exception-type`.
    pub fn exception_type(&self) -> Option<&str> {
        self.string(EXCEPTION_TYPE)
    }
}

/// Why a stream cannot be read, or a message cannot be written. Never quotes the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStreamError {
    /// A message's total length is over the decoder's limit (or, writing, over `u32::MAX`).
    TooLong,
    /// A prelude whose lengths cannot frame a message: a total under 16 bytes, or headers longer
    /// than the total leaves room for.
    BadLength,
    /// The prelude's CRC32 does not match its first 8 bytes.
    PreludeCrc,
    /// The message's CRC32 does not match the bytes before it.
    MessageCrc,
    /// A header's name or value runs past the end of the headers block.
    HeaderOverrun,
    /// A header's value type is not one of 0 to 9.
    UnknownValueType,
    /// A header's name, or a string value, is not UTF-8.
    NotUtf8,
    /// Two headers of one message have the same name.
    DuplicateHeader,
    /// Writing: a header name over 255 bytes, or a string value over 65,535.
    HeaderTooLong,
    /// The stream ended inside a message.
    Truncated,
}

impl std::fmt::Display for EventStreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::TooLong => "an event stream message is longer than the limit",
            Self::BadLength => "an event stream prelude's lengths frame no message",
            Self::PreludeCrc => "an event stream prelude's checksum does not match",
            Self::MessageCrc => "an event stream message's checksum does not match",
            Self::HeaderOverrun => "an event stream header runs past its block",
            Self::UnknownValueType => "an event stream header has an unknown value type",
            Self::NotUtf8 => "an event stream header is not UTF-8",
            Self::DuplicateHeader => "an event stream message names a header twice",
            Self::HeaderTooLong => "an event stream header is too long to write",
            Self::Truncated => "an event stream ended inside a message",
        })
    }
}

impl std::error::Error for EventStreamError {}

/// Decodes an event stream pushed in chunks of any size.
#[derive(Debug, Clone)]
pub struct Decoder {
    /// The incomplete message (bytes, not yet decoded); empty between messages.
    pending: Vec<u8>,
    /// The first error: the stream is unreadable from there on.
    broken: Option<EventStreamError>,
    limit: usize,
}

impl Decoder {
    /// A decoder refusing any message longer than `limit` bytes in all (prelude and CRCs included).
    pub fn new(limit: usize) -> Self {
        Self {
            pending: Vec::new(),
            broken: None,
            limit,
        }
    }

    /// Feeds a chunk; appends every message it completes to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Message>) -> Result<(), EventStreamError> {
        self.read(bytes, out, false).map(|_| ())
    }

    /// [`Self::push`] up to the end of the first message it completes: how many bytes of `bytes`
    /// it read (all of them when it completed none). The rest is for a later push; the messages
    /// are the same however a stream is split.
    pub fn push_message(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<Message>,
    ) -> Result<usize, EventStreamError> {
        self.read(bytes, out, true)
    }

    /// The end of the stream: an error when it ended inside a message (or was already broken).
    pub fn finish(&self) -> Result<(), EventStreamError> {
        match self.broken {
            Some(e) => Err(e),
            None if self.pending.is_empty() => Ok(()),
            None => Err(EventStreamError::Truncated),
        }
    }

    fn read(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<Message>,
        one: bool,
    ) -> Result<usize, EventStreamError> {
        if let Some(e) = self.broken {
            return Err(e);
        }
        let read = self.read_messages(chunk, out, one);
        if let Err(e) = read {
            self.broken = Some(e);
            self.pending = Vec::new();
        }
        read
    }

    fn read_messages(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<Message>,
        one: bool,
    ) -> Result<usize, EventStreamError> {
        let mut bytes = chunk;
        loop {
            if self.pending.is_empty() {
                // The whole message is in this chunk: read in place, not copied.
                let Some(total) = self.total(bytes)? else {
                    break;
                };
                let Some((frame, rest)) = bytes.split_at_checked(total) else {
                    break;
                };
                out.push(message(frame)?);
                bytes = rest;
            } else {
                // The prelude first, so a bad one fails before the rest is buffered.
                let want = PRELUDE.saturating_sub(self.pending.len());
                bytes = self.take(bytes, want);
                let Some(total) = self.total(&self.pending)? else {
                    break;
                };
                bytes = self.take(bytes, total.saturating_sub(self.pending.len()));
                if self.pending.len() < total {
                    break;
                }
                out.push(message(&self.pending)?);
                self.pending.clear();
            }
            if one {
                return Ok(chunk.len() - bytes.len());
            }
        }
        self.pending.extend_from_slice(bytes);
        Ok(chunk.len())
    }

    /// Moves up to `n` bytes of `bytes` to the pending message; the bytes left.
    fn take<'a>(&mut self, bytes: &'a [u8], n: usize) -> &'a [u8] {
        let (head, rest) = bytes.split_at(n.min(bytes.len()));
        self.pending.extend_from_slice(head);
        rest
    }

    /// The total length of the message `bytes` starts with, once its prelude is there (`None`
    /// before), its checksum and lengths checked.
    fn total(&self, bytes: &[u8]) -> Result<Option<usize>, EventStreamError> {
        let Some(prelude) = bytes.first_chunk::<PRELUDE>() else {
            return Ok(None);
        };
        let (lengths, crc) = prelude.split_at(8);
        if crc32(lengths) != be32(crc) {
            return Err(EventStreamError::PreludeCrc);
        }
        let (total, headers) = lengths.split_at(4);
        let total = usize::try_from(be32(total)).map_err(|_| EventStreamError::TooLong)?;
        let headers = usize::try_from(be32(headers)).map_err(|_| EventStreamError::BadLength)?;
        if total < FRAME || headers > total - FRAME {
            return Err(EventStreamError::BadLength);
        }
        if total > self.limit {
            return Err(EventStreamError::TooLong);
        }
        Ok(Some(total))
    }
}

/// A whole message (its length the prelude's total, checked): its checksum, headers and payload.
fn message(frame: &[u8]) -> Result<Message, EventStreamError> {
    let (body, crc) = frame
        .split_last_chunk::<4>()
        .ok_or(EventStreamError::BadLength)?;
    if crc32(body) != be32(crc) {
        return Err(EventStreamError::MessageCrc);
    }
    let (prelude, rest) = body
        .split_at_checked(PRELUDE)
        .ok_or(EventStreamError::BadLength)?;
    let headers_len = prelude.get(4..8).map_or(0, be32);
    let (mut block, payload) = usize::try_from(headers_len)
        .ok()
        .and_then(|n| rest.split_at_checked(n))
        .ok_or(EventStreamError::BadLength)?;
    let mut headers: Vec<Header> = Vec::new();
    while !block.is_empty() {
        let header = read_header(&mut block)?;
        if headers.iter().any(|h| h.name == header.name) {
            return Err(EventStreamError::DuplicateHeader);
        }
        headers.push(header);
    }
    Ok(Message {
        headers,
        payload: payload.to_vec(),
    })
}

/// Reads one header from the front of `block`.
fn read_header(block: &mut &[u8]) -> Result<Header, EventStreamError> {
    let name_len = usize::from(u8_at(block)?);
    let name = std::str::from_utf8(bytes_at(block, name_len)?)
        .map_err(|_| EventStreamError::NotUtf8)?
        .to_owned();
    let value = match u8_at(block)? {
        0 => Value::Bool(true),
        1 => Value::Bool(false),
        2 => Value::Byte(i8::from_be_bytes(array_at(block)?)),
        3 => Value::Short(i16::from_be_bytes(array_at(block)?)),
        4 => Value::Int(i32::from_be_bytes(array_at(block)?)),
        5 => Value::Long(i64::from_be_bytes(array_at(block)?)),
        6 => {
            let len = usize::from(u16::from_be_bytes(array_at(block)?));
            Value::Bytes(bytes_at(block, len)?.to_vec())
        }
        7 => {
            let len = usize::from(u16::from_be_bytes(array_at(block)?));
            let text = std::str::from_utf8(bytes_at(block, len)?)
                .map_err(|_| EventStreamError::NotUtf8)?;
            Value::String(text.to_owned())
        }
        8 => Value::Timestamp(i64::from_be_bytes(array_at(block)?)),
        9 => Value::Uuid(array_at(block)?),
        _ => return Err(EventStreamError::UnknownValueType),
    };
    Ok(Header { name, value })
}

fn bytes_at<'a>(block: &mut &'a [u8], n: usize) -> Result<&'a [u8], EventStreamError> {
    let (head, rest) = block
        .split_at_checked(n)
        .ok_or(EventStreamError::HeaderOverrun)?;
    *block = rest;
    Ok(head)
}

fn array_at<const N: usize>(block: &mut &[u8]) -> Result<[u8; N], EventStreamError> {
    let (head, rest) = block
        .split_first_chunk::<N>()
        .ok_or(EventStreamError::HeaderOverrun)?;
    *block = rest;
    Ok(*head)
}

fn u8_at(block: &mut &[u8]) -> Result<u8, EventStreamError> {
    array_at::<1>(block).map(|[b]| b)
}

/// A big-endian u32 from the first 4 bytes (callers pass exactly 4).
fn be32(bytes: &[u8]) -> u32 {
    bytes
        .first_chunk::<4>()
        .map_or(0, |b| u32::from_be_bytes(*b))
}

/// Appends one message: `headers` as string values (type 7) in the order given, then `payload`,
/// both checksums written. On an error nothing is appended.
pub fn encode(
    out: &mut Vec<u8>,
    headers: &[(&str, &str)],
    payload: &[u8],
) -> Result<(), EventStreamError> {
    let headers = headers
        .iter()
        .map(|(name, value)| (*name, Out::String(value)));
    write_message(out, headers, payload)
}

/// Appends `message` with each header of its own type: the bytes a decoder read it from (the
/// wire form is fixed by the headers, their order and the payload). On an error nothing is appended.
pub fn encode_message(out: &mut Vec<u8>, message: &Message) -> Result<(), EventStreamError> {
    let headers = message
        .headers
        .iter()
        .map(|h| (h.name.as_str(), Out::Value(&h.value)));
    write_message(out, headers, &message.payload)
}

/// A header value to write.
#[derive(Clone, Copy)]
enum Out<'a> {
    String(&'a str),
    Value(&'a Value),
}

impl Out<'_> {
    /// Its length on the wire, type byte included; an error when a length does not fit its prefix.
    fn len(self) -> Result<usize, EventStreamError> {
        let var = |n: usize| {
            if n > usize::from(u16::MAX) {
                return Err(EventStreamError::HeaderTooLong);
            }
            Ok(3 + n)
        };
        match self {
            Self::String(s) => var(s.len()),
            Self::Value(v) => match v {
                Value::Bool(_) => Ok(1),
                Value::Byte(_) => Ok(2),
                Value::Short(_) => Ok(3),
                Value::Int(_) => Ok(5),
                Value::Long(_) | Value::Timestamp(_) => Ok(9),
                Value::Bytes(b) => var(b.len()),
                Value::String(s) => var(s.len()),
                Value::Uuid(_) => Ok(17),
            },
        }
    }

    /// Appends its type byte and bytes (lengths checked by [`Self::len`]).
    fn write(self, out: &mut Vec<u8>) {
        let var = |out: &mut Vec<u8>, kind: u8, bytes: &[u8]| {
            out.push(kind);
            out.extend_from_slice(&u16::try_from(bytes.len()).unwrap_or(0).to_be_bytes());
            out.extend_from_slice(bytes);
        };
        match self {
            Self::String(s) => var(out, 7, s.as_bytes()),
            Self::Value(v) => match v {
                Value::Bool(true) => out.push(0),
                Value::Bool(false) => out.push(1),
                Value::Byte(n) => {
                    out.push(2);
                    out.extend_from_slice(&n.to_be_bytes());
                }
                Value::Short(n) => {
                    out.push(3);
                    out.extend_from_slice(&n.to_be_bytes());
                }
                Value::Int(n) => {
                    out.push(4);
                    out.extend_from_slice(&n.to_be_bytes());
                }
                Value::Long(n) => {
                    out.push(5);
                    out.extend_from_slice(&n.to_be_bytes());
                }
                Value::Bytes(b) => var(out, 6, b),
                Value::String(s) => var(out, 7, s.as_bytes()),
                Value::Timestamp(n) => {
                    out.push(8);
                    out.extend_from_slice(&n.to_be_bytes());
                }
                Value::Uuid(b) => {
                    out.push(9);
                    out.extend_from_slice(b);
                }
            },
        }
    }
}

/// Frames the headers and the payload: lengths checked before a byte is appended.
fn write_message<'a>(
    out: &mut Vec<u8>,
    headers: impl Iterator<Item = (&'a str, Out<'a>)> + Clone,
    payload: &[u8],
) -> Result<(), EventStreamError> {
    let mut headers_len = 0usize;
    for (name, value) in headers.clone() {
        if name.len() > usize::from(u8::MAX) {
            return Err(EventStreamError::HeaderTooLong);
        }
        headers_len = headers_len
            .checked_add(1 + name.len() + value.len()?)
            .ok_or(EventStreamError::TooLong)?;
    }
    let total = FRAME
        .checked_add(headers_len)
        .and_then(|n| n.checked_add(payload.len()))
        .ok_or(EventStreamError::TooLong)?;
    let (Ok(total32), Ok(headers32)) = (u32::try_from(total), u32::try_from(headers_len)) else {
        return Err(EventStreamError::TooLong);
    };
    let start = out.len();
    out.reserve(total);
    out.extend_from_slice(&total32.to_be_bytes());
    out.extend_from_slice(&headers32.to_be_bytes());
    let prelude_crc = crc32(out.get(start..).unwrap_or_default());
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    for (name, value) in headers {
        out.push(u8::try_from(name.len()).unwrap_or(0));
        out.extend_from_slice(name.as_bytes());
        value.write(out);
    }
    out.extend_from_slice(payload);
    let message_crc = crc32(out.get(start..).unwrap_or_default());
    out.extend_from_slice(&message_crc.to_be_bytes());
    Ok(())
}

/// Appends an event as AWS services send one: `:event-type`, `:content-type: application/json`,
/// `:message-type: event`, and its JSON payload.
pub fn encode_event(
    out: &mut Vec<u8>,
    event_type: &str,
    json: &[u8],
) -> Result<(), EventStreamError> {
    let headers = [
        (EVENT_TYPE, event_type),
        (CONTENT_TYPE, "application/json"),
        (MESSAGE_TYPE, "event"),
    ];
    encode(out, &headers, json)
}

/// Appends a modelled exception: `:exception-type`, `:content-type: application/json`,
/// `:message-type: exception`, and its JSON payload (`{"message":"..."}`). botocore raises it as
/// `EventStreamError` with the exception type as its code.
pub fn encode_exception(
    out: &mut Vec<u8>,
    exception_type: &str,
    json: &[u8],
) -> Result<(), EventStreamError> {
    let headers = [
        (EXCEPTION_TYPE, exception_type),
        (CONTENT_TYPE, "application/json"),
        (MESSAGE_TYPE, "exception"),
    ];
    encode(out, &headers, json)
}

/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), a byte a step from a table built at
/// compile time; what zlib's `crc32` and Python's `binascii.crc32` compute.
pub fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |crc, &b| {
        let i = usize::from((crc as u8) ^ b);
        CRC_TABLE.get(i).copied().unwrap_or(0) ^ (crc >> 8)
    })
}

const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut rest: &mut [u32] = &mut table;
    let mut byte = 0u32;
    while let [slot, tail @ ..] = rest {
        let mut crc = byte;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        *slot = crc;
        rest = tail;
        byte += 1;
    }
    table
}

#[cfg(test)]
mod tests;
