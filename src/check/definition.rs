//! The words a check is defined in: the stage it reads, whether it blocks, what it decides with,
//! and when its failures alert. `config` compiles the operator's JSON into them (and re-exports
//! them as `config::Stage` etc.); every module that decides reads them.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    Input,
    Output,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::Output => "output",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Block,
    Background,
}

/// What a check decides with. Rule kinds run in the filter; judged kinds ask a judge model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    NotContains,
    MatchesPattern,
    PoliteTone,
    CorrectFormat,
    NoMadeUpFacts,
    /// The operator's own rule, written in `expected`.
    CustomRule {
        rule: String,
    },
}

impl Kind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotContains => "not_contains",
            Self::MatchesPattern => "matches_pattern",
            Self::PoliteTone => "polite_tone",
            Self::CorrectFormat => "correct_format",
            Self::NoMadeUpFacts => "no_made_up_facts",
            Self::CustomRule { .. } => "custom_rule",
        }
    }

    pub fn is_rule(&self) -> bool {
        matches!(self, Self::NotContains | Self::MatchesPattern)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Alert {
    pub failure_rate: f64,
    pub over_last: u32,
}
