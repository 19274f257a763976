//! Command-line arguments: positionals, `--name VALUE` (or `--name=VALUE`) options and `--flag`s.

use std::collections::BTreeMap;
use std::fmt;

/// Why the arguments do not parse (the command prints it above its usage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgsError {
    /// An option that takes a value is last, with none.
    NeedsValue(String),
    /// An option is given twice.
    GivenTwice(String),
    /// An option the command does not take (or a flag given a value).
    Unknown(String),
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeedsValue(name) => write!(f, "{name} needs a value"),
            Self::GivenTwice(name) => write!(f, "{name} is given twice"),
            Self::Unknown(arg) => write!(f, "unknown option {arg}"),
        }
    }
}

/// Parsed arguments.
pub struct Args {
    /// The arguments that are not options, in order.
    pub positional: Vec<String>,
    values: BTreeMap<String, String>,
    flags: Vec<String>,
}

impl Args {
    /// Parses `args`, taking the options in `with_value` and the flags in `flags`; any other
    /// `--name` is an error.
    pub fn parse(args: &[String], with_value: &[&str], flags: &[&str]) -> Result<Self, ArgsError> {
        let mut out = Self {
            positional: Vec::new(),
            values: BTreeMap::new(),
            flags: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if !arg.starts_with("--") {
                out.positional.push(arg.clone());
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (arg.as_str(), None),
            };
            if with_value.contains(&name) {
                let value = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| ArgsError::NeedsValue(name.to_owned()))?,
                };
                if out.values.insert(name.to_owned(), value).is_some() {
                    return Err(ArgsError::GivenTwice(name.to_owned()));
                }
            } else if flags.contains(&name) && inline.is_none() {
                out.flags.push(name.to_owned());
            } else {
                return Err(ArgsError::Unknown(arg.clone()));
            }
        }
        Ok(out)
    }

    /// An option's value.
    pub fn value(&self, name: &str) -> Option<String> {
        self.values.get(name).cloned()
    }

    /// Whether a flag was given.
    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }
}
