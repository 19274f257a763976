//! Helpers the vendor formats share.

use serde_json::Value;

use super::event::Ev;
use super::format::Unreadable;
pub(crate) use super::pointer::at;
use crate::sse;

/// An event's JSON as a tree, read as serde_json reads it (a key twice counts with its last
/// value), and whether the event may go out as it came: only when no object of it repeats a
/// key (read by the one-pass reader, `json::reader`). One that repeats a key goes out as its
/// tree, which kept the last, so that no reader of what the caller gets can take text that
/// was not checked.
pub(crate) fn parse(event: &sse::Event) -> Result<(Value, bool), Unreadable> {
    if let Some(data) = crate::json::reader::read_value(event.data.as_bytes()) {
        return Ok((data, true));
    }
    serde_json::from_str(&event.data)
        .map(|data| (data, false))
        .map_err(|_| Unreadable)
}

/// Writes an event: an unchanged one as it came (key order, spacing and escapes included).
pub(crate) fn write(ev: &Ev, out: &mut Vec<u8>) {
    if let Some(raw) = ev.raw() {
        sse::encode(out, ev.name.as_deref(), raw);
        return;
    }
    let data = serde_json::to_string(ev.data()).unwrap_or_default();
    sse::encode(out, ev.name.as_deref(), &data);
}

pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    at(value, pointer).and_then(Value::as_str)
}

pub(crate) fn u64_at(value: &Value, pointer: &str) -> Option<u64> {
    at(value, pointer).and_then(Value::as_u64)
}
