//! JSON pointers (RFC 6901) read without allocating, below everything that reads an event's tree:
//! the event itself ([`super::event`]) and the helpers the vendor formats share ([`super::util`]).

use serde_json::Value;

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
