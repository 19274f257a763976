//! JSON helpers shared by the vendors: a strict parse for request bodies, the scalar values of a
//! tool call's arguments as written, and SSE framing.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses a request body: UTF-8, one JSON value, and no object with the same key twice (after
/// unescaping), at any depth. Depth is bounded by serde_json's recursion limit (128).
pub(crate) fn parse_strict(body: &[u8]) -> Result<Value, String> {
    let body =
        std::str::from_utf8(body).map_err(|_| "the request body is not UTF-8".to_string())?;
    match serde_json::from_str::<Strict>(body) {
        Ok(Strict(value)) => Ok(value),
        Err(e) if e.is_data() => Err(format!(
            "the request body has a duplicate key (line {}, column {})",
            e.line(),
            e.column()
        )),
        Err(e) => Err(format!(
            "the request body is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        )),
    }
}

/// A JSON value whose objects never repeat a key.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                // Never echo the key: it is body text.
                return Err(de::Error::custom("duplicate key"));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// Every scalar value of a JSON text, in order: strings decoded, numbers and booleans as written,
/// `null` and object keys left out. A text that is not JSON is one value, as is. A flat scan, so no
/// nesting depth can exhaust the stack.
pub(super) fn scalars_of_text(text: &str) -> Vec<String> {
    if serde_json::from_str::<de::IgnoredAny>(text).is_err() {
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
                    if let Ok(s) = serde_json::from_str::<String>(raw) {
                        out.push(s);
                    }
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
pub(super) fn scalars_of_value(value: &Value) -> Vec<String> {
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
pub(super) fn to_vec(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Appends one SSE event: an `event:` line when named, then the JSON as one `data:` line.
pub(super) fn push_event(out: &mut Vec<u8>, event: Option<&str>, data: &Value) {
    let data = serde_json::to_string(data).unwrap_or_default();
    crate::sse::encode(out, event, &data);
}

/// A string field of an object, if it is a string.
pub(super) fn str_field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

/// An optional boolean field: absent or `null` is false; any other non-boolean is an error.
pub(super) fn bool_field(object: &Map<String, Value>, key: &str) -> Result<bool, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("{key} must be a boolean")),
    }
}

/// An optional string field: absent or `null` is `None`; any other non-string is an error.
pub(super) fn opt_str_field(
    object: &Map<String, Value>,
    key: &str,
) -> Result<Option<String>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{key} must be a string")),
    }
}
