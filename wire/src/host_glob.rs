//! Host names with one `*`, shared by the filter's `hosts` and the sidecar's `[[upstreams]]`: one
//! name per platform region or resource (`*.openai.azure.com`, `*-aiplatform.googleapis.com`,
//! `bedrock-runtime.*.amazonaws.com`).
//!
//! The `*` stands for one or more characters within one DNS label (letters, digits, `-`, `_`),
//! never a `.`: `*.openai.azure.com` matches `my-resource.openai.azure.com`, not
//! `a.b.openai.azure.com` nor `openai.azure.com`. Matching ignores ASCII case.

/// A host pattern holding one `*`, lower-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGlob {
    prefix: String,
    suffix: String,
}

/// Why a host pattern is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlobError {
    /// More than one `*`.
    SeveralStars,
    /// A character a host name does not hold, or an empty label.
    NotAHost,
    /// The `*` stands in the last label (`example.*`): it would match any top-level domain.
    StarInLastLabel,
}

impl std::fmt::Display for GlobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::SeveralStars => "may hold one `*` only",
            Self::NotAHost => {
                "is not a host name (letters, digits, `-`, `_` and `.` between labels, one `*`)"
            }
            Self::StarInLastLabel => "may not hold its `*` in the last label",
        })
    }
}

/// A character of a DNS label as the `*` may match it.
fn label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_')
}

impl HostGlob {
    /// The pattern, when `host` holds a `*` (`Ok(None)`: a plain host name, matched exactly).
    pub fn parse(host: &str) -> Result<Option<HostGlob>, GlobError> {
        let Some((prefix, suffix)) = host.split_once('*') else {
            return Ok(None);
        };
        if suffix.contains('*') {
            return Err(GlobError::SeveralStars);
        }
        let labels_ok = host
            .split('.')
            .all(|label| !label.is_empty() && label.chars().all(|c| c == '*' || label_char(c)));
        if !labels_ok {
            return Err(GlobError::NotAHost);
        }
        if !suffix.contains('.') {
            return Err(GlobError::StarInLastLabel);
        }
        Ok(Some(HostGlob {
            prefix: prefix.to_ascii_lowercase(),
            suffix: suffix.to_ascii_lowercase(),
        }))
    }

    /// What the `*` matched in `host` (as written in `host`), or `None` when it does not match.
    pub fn capture<'h>(&self, host: &'h str) -> Option<&'h str> {
        let lower = host.to_ascii_lowercase();
        if !lower.starts_with(&self.prefix) || !lower.ends_with(&self.suffix) {
            return None;
        }
        let end = host.len().checked_sub(self.suffix.len())?;
        let star = host.get(self.prefix.len()..end)?;
        (!star.is_empty() && star.chars().all(label_char)).then_some(star)
    }

    /// How many characters the pattern fixes: among several that match, the longest wins.
    pub fn fixed_len(&self) -> usize {
        self.prefix.len() + self.suffix.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(pattern: &str) -> HostGlob {
        HostGlob::parse(pattern).unwrap().unwrap()
    }

    #[test]
    fn the_star_stands_for_one_or_more_characters_of_one_label() {
        let azure = glob("*.openai.azure.com");
        assert_eq!(azure.capture("my-res.openai.azure.com"), Some("my-res"));
        assert_eq!(azure.capture("My-Res.OpenAI.Azure.com"), Some("My-Res"));
        assert_eq!(azure.capture("a.b.openai.azure.com"), None);
        assert_eq!(azure.capture(".openai.azure.com"), None);
        assert_eq!(azure.capture("openai.azure.com"), None);
        assert_eq!(azure.capture("x.openai.azure.com.evil.example"), None);
        let vertex = glob("*-aiplatform.googleapis.com");
        assert_eq!(
            vertex.capture("us-east5-aiplatform.googleapis.com"),
            Some("us-east5")
        );
        assert_eq!(vertex.capture("aiplatform.googleapis.com"), None);
        let bedrock = glob("bedrock-runtime.*.amazonaws.com");
        assert_eq!(
            bedrock.capture("bedrock-runtime.eu-west-1.amazonaws.com"),
            Some("eu-west-1")
        );
        assert_eq!(bedrock.capture("bedrock-runtime.amazonaws.com"), None);
        assert_eq!(
            bedrock.capture("bedrock-runtime.a.b.amazonaws.com"),
            None,
            "a `.` is not the star's"
        );
        assert!(glob("*.openai.azure.com").fixed_len() < glob("x*.openai.azure.com").fixed_len());
    }

    #[test]
    fn a_pattern_is_a_host_name_with_one_star_outside_its_last_label() {
        assert_eq!(HostGlob::parse("api.openai.com"), Ok(None));
        assert_eq!(
            HostGlob::parse("*.*.azure.com"),
            Err(GlobError::SeveralStars)
        );
        for bad in [
            "*..azure.com",
            "*.azure.com/",
            "*.azure com",
            "*.azure.com:443",
            ".*.com",
        ] {
            assert_eq!(HostGlob::parse(bad), Err(GlobError::NotAHost), "{bad}");
        }
        assert_eq!(HostGlob::parse("*"), Err(GlobError::StarInLastLabel));
        assert_eq!(
            HostGlob::parse("example.c*"),
            Err(GlobError::StarInLastLabel)
        );
    }
}
