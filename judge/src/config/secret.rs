//! Values read from env vars that must never be printed (keys, tokens, URLs with passwords): the
//! [`Secret`] type, and the one way a config setting naming an env var reads it.

use std::fmt;

/// A value read from an env var that must never be printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub(super) String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

/// An env var's value, or a problem naming the setting and the variable (never the value).
pub(super) fn secret_from(
    env: &dyn Fn(&str) -> Option<String>,
    var: &str,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<Secret> {
    match env(var) {
        Some(value) if !value.trim().is_empty() => Some(Secret(value.trim().to_owned())),
        _ => {
            problems.push(format!("{at} names {var}, which is not set"));
            None
        }
    }
}
