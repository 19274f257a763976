//! Command-line arguments: positionals, `--name VALUE` (or `--name=VALUE`) options and `--flag`s.

use std::collections::BTreeMap;

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
    pub fn parse(args: &[String], with_value: &[&str], flags: &[&str]) -> Result<Self, String> {
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
                        .ok_or_else(|| format!("{name} needs a value"))?,
                };
                if out.values.insert(name.to_owned(), value).is_some() {
                    return Err(format!("{name} is given twice"));
                }
            } else if flags.contains(&name) && inline.is_none() {
                out.flags.push(name.to_owned());
            } else {
                return Err(format!("unknown option {arg}"));
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
