//! What stopped a turn, and the `X-Core-Check` header that tells the caller.
//!
//! The header is an RFC 8941 dictionary: `stage=input, check="no-passwords", code=input_check_failed`.
//! It names the first blocking check that stopped the turn and never carries a pattern, expected
//! text, threshold, score or reason.

use sfv::{key_ref, DictSerializer, StringRef, TokenRef};

use super::definition::Stage;

pub const HEADER: &str = "x-core-check";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InputCheckFailed,
    OutputCheckFailed,
    CheckErrored,
    /// A tool call was denied (by a `tool_checks` row or `allowed_tools`).
    ToolCallDenied,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InputCheckFailed => "input_check_failed",
            Self::OutputCheckFailed => "output_check_failed",
            Self::CheckErrored => "check_errored",
            Self::ToolCallDenied => "tool_call_denied",
        }
    }

    /// The code for a check that failed (not errored) at `stage`.
    pub fn failed_at(stage: Stage) -> Self {
        match stage {
            Stage::Input => Self::InputCheckFailed,
            Stage::Output => Self::OutputCheckFailed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub stage: Stage,
    pub check: String,
    pub code: Code,
}

impl Stop {
    /// The header value. Check names are validated at configuration time (letters, digits and
    /// `-_.:`), so serialising cannot fail for a configured name; `None` only for one that is not.
    pub fn header_value(&self) -> Option<String> {
        let stage = match self.stage {
            Stage::Input => TokenRef::constant("input"),
            Stage::Output => TokenRef::constant("output"),
        };
        let code = match self.code {
            Code::InputCheckFailed => TokenRef::constant("input_check_failed"),
            Code::OutputCheckFailed => TokenRef::constant("output_check_failed"),
            Code::CheckErrored => TokenRef::constant("check_errored"),
            Code::ToolCallDenied => TokenRef::constant("tool_call_denied"),
        };
        let check = StringRef::from_str(&self.check).ok()?;
        let mut dict = DictSerializer::new();
        let _ = dict.bare_item(key_ref("stage"), stage);
        let _ = dict.bare_item(key_ref("check"), check);
        let _ = dict.bare_item(key_ref("code"), code);
        dict.finish()
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn header_is_the_documented_dictionary() {
        let stop = Stop {
            stage: Stage::Input,
            check: "no-passwords".into(),
            code: Code::InputCheckFailed,
        };
        assert_eq!(
            stop.header_value().as_deref(),
            Some(r#"stage=input, check="no-passwords", code=input_check_failed"#)
        );
    }

    #[test]
    fn header_parses_back_as_rfc8941() {
        let stop = Stop {
            stage: Stage::Output,
            check: "no-iban".into(),
            code: Code::CheckErrored,
        };
        let value = stop.header_value().unwrap();
        let dict: sfv::Dictionary = sfv::Parser::new(&value).parse().unwrap();
        assert_eq!(dict.len(), 3);
        assert_eq!(
            Code::failed_at(Stage::Output).as_str(),
            "output_check_failed"
        );
    }
}
