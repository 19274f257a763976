//! The tree a JSON text is read into ([`Node`], [`Obj`]): strings borrowed from the text, the rest
//! laid out in an arena. Its own room so that both readers (the one-pass [`super::reader`] and
//! serde_json's, in [`super`]) build it without importing each other.

use std::fmt;

use serde_json::Value;

/// A JSON value borrowing its strings from the text it was read from where they hold no escape,
/// and the rest (decoded strings, arrays, objects) from the arena it was read into. Nothing in it
/// owns memory: the arena frees it all at once. Read from a request ([`parse_node`]) its objects
/// never repeat a key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    /// A number as serde_json reads it (the text is not kept; no arbitrary precision, so it owns
    /// nothing).
    Number(serde_json::Number),
    Str(&'a str),
    Array(&'a [Node<'a>]),
    Object(Obj<'a>),
}

/// An object's members in the order written; a key written twice (answers only) counts once, with
/// its last value.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Obj<'a>(&'a [(&'a str, Node<'a>)]);

impl<'a> Obj<'a> {
    pub(super) fn new(members: &'a [(&'a str, Node<'a>)]) -> Self {
        Obj(members)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'a Node<'a>> {
        self.0.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// A string field, if it is a string.
    pub(crate) fn str_field(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Node::as_str)
    }

    /// An optional boolean field: absent or `null` is false; any other non-boolean is an error.
    pub(crate) fn bool_field(&self, key: &str) -> Result<bool, FieldError> {
        match self.get(key) {
            None | Some(Node::Null) => Ok(false),
            Some(Node::Bool(b)) => Ok(*b),
            Some(_) => Err(FieldError::must_be(key, "a boolean")),
        }
    }

    /// An optional string field: absent or `null` is `None`; any other non-string is an error.
    pub(crate) fn opt_str_field(&self, key: &str) -> Result<Option<String>, FieldError> {
        match self.get(key) {
            None | Some(Node::Null) => Ok(None),
            Some(Node::Str(s)) => Ok(Some((*s).to_owned())),
            Some(_) => Err(FieldError::must_be(key, "a string")),
        }
    }

    /// The members' values in the order of their keys (as a `serde_json::Map` lists them).
    pub(crate) fn values_by_key(&self) -> Vec<&Node<'a>> {
        self.members_by_key().into_iter().map(|(_, v)| v).collect()
    }

    /// The members in the order of their keys (as a `serde_json::Map` lists them).
    pub(crate) fn members_by_key(&self) -> Vec<(&str, &Node<'a>)> {
        let mut members: Vec<(&str, &Node<'a>)> = self.0.iter().map(|(k, v)| (*k, v)).collect();
        members.sort_by(|a, b| a.0.cmp(b.0));
        members
    }
}

impl<'a> Node<'a> {
    pub(crate) fn as_str(&self) -> Option<&'a str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_object(&self) -> Option<&Obj<'a>> {
        match self {
            Node::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The same value as a `serde_json::Value` (recursive: the parse bounds the depth at 128).
    pub(crate) fn to_value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::Str(s) => Value::String((*s).to_owned()),
            Node::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Object(Obj(members)) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

/// Whether two members share a key: pairwise for the small objects requests are made of, sorted
/// for large ones (so no object costs quadratic time).
pub(super) fn has_repeated_key(members: &[(&str, Node<'_>)]) -> bool {
    if members.len() <= 16 {
        return members
            .iter()
            .enumerate()
            .any(|(i, (k, _))| members.iter().skip(i + 1).any(|(other, _)| other == k));
    }
    let mut keys: Vec<&str> = members.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w.first() == w.get(1))
}

/// A field of a body that is not what its format says it is. Its text names the field and what it
/// must be, never the body's own text: it reaches the caller (a refused request) and the log (an
/// answer withheld as unreadable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FieldError {
    /// `{field} must be {expected}`.
    MustBe {
        field: String,
        expected: &'static str,
    },
    /// `a {what} needs {needs}`.
    Needs {
        what: &'static str,
        needs: &'static str,
    },
}

impl FieldError {
    pub(crate) fn must_be(field: impl Into<String>, expected: &'static str) -> Self {
        FieldError::MustBe {
            field: field.into(),
            expected,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldError::MustBe { field, expected } => write!(f, "{field} must be {expected}"),
            FieldError::Needs { what, needs } => write!(f, "a {what} needs {needs}"),
        }
    }
}
