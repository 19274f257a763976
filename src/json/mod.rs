//! JSON helpers shared by the vendors: a strict parse for request bodies, the scalar values of a
//! tool call's arguments as written, and SSE framing.
//!
//! A module of its own, below `api` (the vendors' formats), `stream`, `tools` and `mcp`, which all
//! read JSON with it: [`node`] is the tree, [`reader`] the one-pass reader that builds it, and this
//! file serde_json's reading for what the reader declines.

mod node;
pub(crate) mod reader;

use std::borrow::Cow;

use bumpalo::Bump;
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use node::has_repeated_key;
pub(crate) use node::{FieldError, Node, Obj};

/// Parses a request body: UTF-8, one JSON value, and no object with the same key twice (after
/// unescaping), at any depth. Depth is bounded by serde_json's recursion limit (128).
pub(crate) fn parse_strict(body: &[u8]) -> Result<Value, BodyError> {
    let arena = arena_for(body);
    parse_node(body, &arena).map(|node| node.to_value())
}

/// The arena a tree read from `body` lives in: room for a body's nodes made in one allocation
/// (more are added if it holds more), all freed at once when it is dropped.
pub(crate) fn arena_for(body: &[u8]) -> Bump {
    Bump::with_capacity(body.len().clamp(512, 64 << 10))
}

/// [`parse_strict`] without building a `serde_json::Value`: strings that hold no escape borrow
/// the body, numbers are checked but not kept, arrays and objects (and strings with escapes,
/// decoded) are laid out in `arena`. What input checks read of a request is taken from this tree
/// (one pass over the body, UTF-8 checked as it is read, no allocation of its own per key, string,
/// array or object, and nothing to drop).
pub(crate) fn parse_node<'a>(body: &'a [u8], arena: &'a Bump) -> Result<Node<'a>, BodyError> {
    if let Some(node) = reader::read(body, true, arena) {
        return Ok(node);
    }
    match read_node::<true>(body, arena) {
        Ok(node) => Ok(node),
        // The reader checks UTF-8 inside strings, where any other byte is a syntax error: the
        // whole body is checked only to name the fault.
        Err(_) if std::str::from_utf8(body).is_err() => Err(BodyError::NotUtf8),
        Err(e) if e.is_data() => Err(BodyError::DuplicateKey {
            line: e.line(),
            column: e.column(),
        }),
        Err(e) => Err(BodyError::NotJson {
            line: e.line(),
            column: e.column(),
        }),
    }
}

/// An answer body as a [`Node`] tree, read as serde_json reads it into a `Value`: a key written
/// twice is allowed and its last value counts (the vendors' SDKs read it so too). An error says
/// whether the body is UTF-8 at all.
pub(crate) fn parse_answer_node<'a>(
    body: &'a [u8],
    arena: &'a Bump,
) -> Result<Node<'a>, AnswerFault> {
    if let Some(node) = reader::read(body, false, arena) {
        return Ok(node);
    }
    read_node::<false>(body, arena).map_err(|_| match std::str::from_utf8(body) {
        Ok(_) => AnswerFault::NotJson,
        Err(_) => AnswerFault::NotUtf8,
    })
}

/// Why a request body could not be read ([`parse_node`]). Its text reaches the caller (a refused
/// request): it says where, never what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyError {
    NotUtf8,
    DuplicateKey { line: usize, column: usize },
    NotJson { line: usize, column: usize },
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::NotUtf8 => f.write_str("the request body is not UTF-8"),
            BodyError::DuplicateKey { line, column } => write!(
                f,
                "the request body has a duplicate key (line {line}, column {column})"
            ),
            BodyError::NotJson { line, column } => write!(
                f,
                "the request body is not valid JSON (line {line}, column {column})"
            ),
        }
    }
}

/// Why an answer body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerFault {
    NotUtf8,
    NotJson,
}

/// serde_json's reading of a body [`reader`] declined: the tree if serde_json accepts it,
/// else its error (with the line and column the messages name).
pub(crate) fn read_node<'a, const STRICT: bool>(
    body: &'a [u8],
    arena: &'a Bump,
) -> Result<Node<'a>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let node = NodeSeed::<STRICT>(arena).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(node)
}

/// Reads one [`Node`] into the arena; `STRICT` refuses an object that repeats a key.
struct NodeSeed<'a, const STRICT: bool>(&'a Bump);

impl<'de: 'a, 'a, const STRICT: bool> DeserializeSeed<'de> for NodeSeed<'a, STRICT> {
    type Value = Node<'a>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node<'a>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de: 'a, 'a, const STRICT: bool> Visitor<'de> for NodeSeed<'a, STRICT> {
    type Value = Node<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node<'a>, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node<'a>, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node<'a>, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node<'a>, E> {
        // serde_json never hands over a non-finite number.
        serde_json::Number::from_f64(v)
            .map(Node::Number)
            .ok_or_else(|| E::custom("not a JSON number"))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Node<'a>, E> {
        Ok(Node::Str(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node<'a>, E> {
        Ok(Node::Str(self.0.alloc_str(v)))
    }
    fn visit_unit<E>(self) -> Result<Node<'a>, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node<'a>, E> {
        Ok(Node::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'a>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(NodeSeed::<STRICT>(self.0))? {
            items.push(item);
        }
        Ok(Node::Array(self.0.alloc_slice_fill_iter(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'a>, A::Error> {
        let mut members: Vec<(&'a str, Node<'a>)> = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key>()? {
            let key: &'a str = match key {
                Cow::Borrowed(k) => k,
                Cow::Owned(k) => self.0.alloc_str(&k),
            };
            let value = map.next_value_seed(NodeSeed::<STRICT>(self.0))?;
            members.push((key, value));
        }
        if STRICT && has_repeated_key(&members) {
            // Never echo the key: it is body text.
            return Err(de::Error::custom("duplicate key"));
        }
        Ok(Node::Object(Obj::new(
            self.0.alloc_slice_fill_iter(members),
        )))
    }
}

/// An object key, borrowed from the text where it holds no escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

/// Every scalar value of a JSON text, in order: strings decoded, numbers and booleans as written,
/// `null` and object keys left out. A text that is not JSON is one value, as is. A flat scan, so no
/// nesting depth can exhaust the stack. JSON is what serde_json accepts: the text is read by the
/// reader first, and by serde_json only when the reader declines it (serde_json's skipping read
/// lets a lone surrogate escape by, which is read as U+FFFD: the rest of its string still counts).
pub(crate) fn scalars_of_text(text: &str) -> Vec<String> {
    let json =
        reader::is_json(text.as_bytes()) || serde_json::from_str::<de::IgnoredAny>(text).is_ok();
    if !json {
        return vec![text.to_owned()];
    }
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                let end = string_end(bytes, i);
                let raw = text.get(i..end).unwrap_or_default();
                let next = bytes
                    .get(end..)
                    .unwrap_or_default()
                    .iter()
                    .find(|c| !c.is_ascii_whitespace());
                if next != Some(&b':') {
                    // The text is JSON (checked above): the string is what lies between its
                    // quotes, decoded.
                    let inner = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"'));
                    out.extend(inner.and_then(reader::decode_lossy));
                }
                i = end;
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                let end = bytes
                    .get(i..)
                    .unwrap_or_default()
                    .iter()
                    .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z'))
                    .map_or(bytes.len(), |n| i + n);
                let token = text.get(i..end).unwrap_or_default();
                if token != "null" {
                    out.push(token.to_owned());
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    out
}

/// The scalar values of a parsed JSON value (an Anthropic `tool_use.input`), in document order.
/// Numbers are as serde_json writes them back; iterative, so no depth exhausts the stack.
pub(crate) fn scalars_of_value(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Null => {}
            Value::Bool(b) => out.push(b.to_string()),
            Value::Number(n) => out.push(n.to_string()),
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => stack.extend(items.iter().rev()),
            Value::Object(map) => stack.extend(map.values().rev()),
        }
    }
    out
}

/// The index just past the closing quote of the JSON string starting at `start` (a `"`).
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Serializes a value the filter built. Serializing a `Value` cannot fail (its keys are strings).
pub(crate) fn to_vec(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Appends one SSE event: an `event:` line when named, then the JSON as one `data:` line.
pub(crate) fn push_event(out: &mut Vec<u8>, event: Option<&str>, data: &Value) {
    let data = serde_json::to_string(data).unwrap_or_default();
    crate::sse::encode(out, event, &data);
}

/// Appends an event named by its own `type`.
pub(crate) fn push_typed(out: &mut Vec<u8>, event: &Value) {
    push_event(out, event.get("type").and_then(Value::as_str), event);
}

/// A string field of an object, if it is a string.
pub(crate) fn str_field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}
