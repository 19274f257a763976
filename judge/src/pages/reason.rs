//! Which reasons a page may show. A result's reason is a fixed sentence (the filter's, from
//! [`livecheck_wire::reasons`], or the sidecar's own for a judge that could not decide) or a judge
//! model's sentence about the turn, which may quote what the caller or the model wrote. Only the
//! fixed sentences are shown.

use crate::verdict::Failure;

/// The reason when it is a fixed sentence, else `None`.
pub fn shown(reason: &str) -> Option<&str> {
    let fixed =
        livecheck_wire::reasons::FILTER.contains(&reason) || Failure::is_fixed_reason(reason);
    fixed.then_some(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_sentences_are_shown_and_a_judges_own_are_not() {
        assert_eq!(
            shown(livecheck_wire::reasons::CONTAINS),
            Some("The answer contains text it had to avoid.")
        );
        assert!(shown(&Failure::Status(429).reason()).is_some());
        assert_eq!(shown("The answer says the card number is 4111 1111."), None);
        assert_eq!(shown("The text keeps the rule."), None);
    }
}
