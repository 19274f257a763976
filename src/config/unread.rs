//! What becomes of a request livecheck does not read as a turn: the operator's `unread` and
//! `pass_paths`, and the one decision made from them ([`Unread::fate`]).
//!
//! Fail closed: a request that could make a model generate from text no check read is refused,
//! unless it cannot (`GET`, `HEAD`, `OPTIONS` without a protocol upgrade) or the operator passed its
//! path on purpose. An unread endpoint would otherwise be a silent hole.

use super::glob::Glob;

/// The default `pass_paths`: endpoints that make no model generate. Each with why it is safe.
pub const DEFAULT_PASS_PATHS: [&str; 6] = [
    // Token counting (Anthropic, OpenAI Responses, Claude on Vertex, Bedrock): the text is
    // counted, no model answers it.
    "*/v1/messages/count_tokens",
    "*/v1/responses/input_tokens",
    "*/publishers/anthropic/models/count-tokens:rawPredict",
    "*/model/*/count-tokens",
    // Cancelling a batch or a background response: it carries no caller text and only stops
    // generation (Anthropic Message Batches, OpenAI and Azure batches, Responses).
    "*/batches/*/cancel",
    "*/v1/responses/*/cancel",
];

/// Whether requests livecheck does not read are refused (the default) or passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Refuse,
    Pass,
}

/// The compiled `unread` and `pass_paths`.
#[derive(Debug)]
pub struct Unread {
    pub mode: Mode,
    pub pass_paths: Vec<Glob>,
}

/// What becomes of one request livecheck does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// A method that sends nothing a model answers (`GET`, `HEAD`, `OPTIONS`): passes, uncounted.
    Harmless,
    /// Its path matches `pass_paths`, or the operator chose `unread: "pass"`: passes, counted.
    Passed,
    /// Refused (fail closed), counted.
    Refused,
}

/// What `livecheck lint` and the filter's configure say of `unread: "pass"`.
pub const PASS_WARNING: &str = "`unread: \"pass\"` forwards every request livecheck does not read \
    unchecked (files, batches, realtime sessions, Gemini's other methods, any path it does not \
    know): they are counted in livecheck.unread.forwarded but no check reads them; prefer the default \
    (refuse) with `pass_paths` naming the endpoints that make no model generate";

impl Unread {
    /// What an operator should know of this setting: a warning when it passes unread requests.
    pub fn warning(&self) -> Option<&'static str> {
        (self.mode == Mode::Pass).then_some(PASS_WARNING)
    }

    /// What becomes of a request livecheck does not read: its method, `:path`, and whether it
    /// asks for a protocol upgrade (a WebSocket, such as a realtime session, streams both ways
    /// past every check, whatever its method).
    pub fn fate(&self, method: &str, path: &str, upgrade: bool) -> Fate {
        if !upgrade && matches!(method, "GET" | "HEAD" | "OPTIONS") {
            return Fate::Harmless;
        }
        if self.mode == Mode::Pass {
            return Fate::Passed;
        }
        let path = path.split(['?', '#']).next().unwrap_or(path);
        if plain(path) && self.pass_paths.iter().any(|glob| glob.matches(path)) {
            Fate::Passed
        } else {
            Fate::Refused
        }
    }
}

/// A path a glob may pass: no empty, `.` or `..` segment, no backslash and no percent-encoded
/// `/`, `\` or `.`, so a passed path cannot be one the upstream reads as another (a path that is
/// not plain is refused whatever the globs say).
fn plain(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    path.starts_with('/')
        && !path.contains('\\')
        && !["%2f", "%5c", "%2e"].iter().any(|e| lower.contains(e))
        && path
            .split('/')
            .skip(1)
            .all(|segment| !matches!(segment, "" | "." | ".."))
}

/// Whether a `pass_paths` entry is one: starts with `/` or `*`, 1 to 256 visible ASCII characters
/// without `#`.
pub(super) fn valid_glob(glob: &str) -> bool {
    (glob.starts_with('/') || glob.starts_with('*'))
        && glob.len() <= 256
        && glob.bytes().all(|b| b.is_ascii_graphic() && b != b'#')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Unread {
        Unread {
            mode: Mode::Refuse,
            pass_paths: DEFAULT_PASS_PATHS.iter().map(|g| Glob::new(g)).collect(),
        }
    }

    #[test]
    fn reading_methods_pass_and_every_other_unread_request_is_refused() {
        let unread = defaults();
        for method in ["GET", "HEAD", "OPTIONS"] {
            assert_eq!(unread.fate(method, "/v1/anything", false), Fate::Harmless);
        }
        for (method, path) in [
            ("POST", "/v1/files"),
            ("POST", "/v1/batches"),
            ("POST", "/v1beta/models/gemini-2.5-pro:countTokens"),
            ("PUT", "/v1/messages/count_tokens/x"),
            ("DELETE", "/v1/responses/resp_1"),
            ("post", "/v1/messages"),
            ("POST", ""),
        ] {
            assert_eq!(
                unread.fate(method, path, false),
                Fate::Refused,
                "{method} {path}"
            );
        }
    }

    #[test]
    fn an_upgrade_is_refused_whatever_its_method() {
        assert_eq!(defaults().fate("GET", "/v1/realtime", true), Fate::Refused);
    }

    #[test]
    fn default_pass_paths_pass_token_counting_and_cancels_only() {
        let unread = defaults();
        for path in [
            "/v1/messages/count_tokens",
            "/v1/messages/count_tokens?beta=true",
            "/anthropic/v1/messages/count_tokens",
            "/v1/responses/input_tokens",
            "/v1/projects/p/locations/l/publishers/anthropic/models/count-tokens:rawPredict",
            "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/count-tokens",
            "/v1/messages/batches/msgbatch_1/cancel",
            "/v1/batches/batch_1/cancel",
            "/openai/batches/batch_1/cancel",
            "/v1/responses/resp_1/cancel",
        ] {
            assert_eq!(unread.fate("POST", path, false), Fate::Passed, "{path}");
        }
    }

    #[test]
    fn a_path_that_is_not_plain_is_never_passed_by_a_glob() {
        let unread = defaults();
        for path in [
            "/v1/messages/count_tokens/../../messages",
            "/v1/messages/batches/x/../../../messages/cancel",
            "/v1/messages/batches/%2e%2e/cancel",
            "/v1/messages//count_tokens",
            "/v1/messages/./count_tokens",
            "/model/a%2Fb/count-tokens",
            "/v1\\messages/count_tokens",
        ] {
            assert_eq!(unread.fate("POST", path, false), Fate::Refused, "{path}");
        }
    }

    #[test]
    fn unread_pass_passes_everything_unread_but_counts_it() {
        let unread = Unread {
            mode: Mode::Pass,
            pass_paths: Vec::new(),
        };
        assert_eq!(unread.fate("POST", "/v1/files", false), Fate::Passed);
        assert_eq!(unread.fate("GET", "/v1/realtime", true), Fate::Passed);
        assert_eq!(unread.fate("GET", "/v1/models", false), Fate::Harmless);
    }

    #[test]
    fn pass_path_globs_are_checked() {
        assert!(valid_glob("/healthz"));
        assert!(valid_glob("*/v1/files"));
        assert!(!valid_glob("v1/files"));
        assert!(!valid_glob("/a b"));
        assert!(!valid_glob("/a#b"));
        assert!(!valid_glob(""));
    }
}
