//! Helpers the vendor formats share.

use serde_json::Value;

use super::{Ev, Unreadable};
use crate::sse;

/// An event's JSON as a tree, read as serde_json reads it (a key twice counts with its last
/// value), and whether the event may go out as it came: only when no object of it repeats a
/// key (read by the one-pass reader, `api::reader`). One that repeats a key goes out as its
/// tree, which kept the last, so that no reader of what the caller gets can take text that
/// was not checked.
pub(crate) fn parse(event: &sse::Event) -> Result<(Value, bool), Unreadable> {
    if let Some(data) = crate::api::reader::read_value(event.data.as_bytes()) {
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

/// `Value::pointer` without its allocation per token (it unescapes every token with
/// `replace`; the pointers here are written by this crate and have no `~` escapes, and the
/// rare one that does goes to `Value::pointer`). On the hot path of every event: measured.
pub(crate) fn at<'a>(value: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.as_bytes().contains(&b'~') {
        return value.pointer(pointer);
    }
    let mut v = value;
    for token in pointer.strip_prefix('/')?.split('/') {
        v = match v {
            Value::Object(map) => map.get(token)?,
            Value::Array(items) => items.get(index(token)?)?,
            _ => return None,
        };
    }
    Some(v)
}

/// [`at`], mutable.
pub(crate) fn at_mut<'a>(value: &'a mut Value, pointer: &str) -> Option<&'a mut Value> {
    if pointer.as_bytes().contains(&b'~') {
        return value.pointer_mut(pointer);
    }
    let mut v = value;
    for token in pointer.strip_prefix('/')?.split('/') {
        v = match v {
            Value::Object(map) => map.get_mut(token)?,
            Value::Array(items) => items.get_mut(index(token)?)?,
            _ => return None,
        };
    }
    Some(v)
}

/// An array index token as RFC 6901 reads it: digits, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}
