//! Recovery on the platforms that serve a vendor's API under their own paths and credentials
//! (the paths are [`livecheck_wire::endpoint`]'s):
//!
//! - Google Vertex AI: the caller's `authorization: Bearer` is a Google access token, good for any
//!   request until it expires, so a retry reuses it; a streamed original (`:streamRawPredict`) is
//!   asked again at `:rawPredict`, since a retry is never streamed.
//!   Gemini on Vertex reuses it the same way; on the Gemini API the caller's key (`x-goog-api-key`,
//!   or `?key=` in the path) goes as it came.
//! - Amazon Bedrock (Anthropic's `invoke`, and Converse): the caller signs each request (SigV4
//!   over the method, path, host and body), so a changed body cannot reuse its signature. A retry
//!   goes only when the upstream has a key of its own (`api_key_env`, a Bedrock API key sent as
//!   `Authorization: Bearer`); without one it fails with a fixed reason and the filter withholds
//!   the answer as without `recover`.
//!   A streamed Anthropic original on Bedrock (`invoke-with-response-stream`) is asked again at
//!   `invoke`.
//!
//! An upstream's own key, on any platform, replaces the caller's credentials on the retry (on the
//! Gemini API as `x-goog-api-key`, and a `?key=` in the path goes).

use std::borrow::Cow;

use livecheck_wire::{Api, Platform};

use super::Failure;
use crate::config::{Secret, Upstream};

const STREAMED: &str = ":streamRawPredict";
const NOT_STREAMED: &str = ":rawPredict";
const BEDROCK_STREAMED: &str = "/invoke-with-response-stream";
const BEDROCK_NOT_STREAMED: &str = "/invoke";

/// The path a retry asks at: the original's, but a streamed one at its API's path that is not (a
/// Vertex `:streamRawPredict` at `:rawPredict` and a Bedrock `/invoke-with-response-stream` at
/// `/invoke`, the query kept; Gemini's and Converse's: their files'). `own_key`: the upstream's key
/// goes in place of the caller's, so a Gemini `?key=` goes.
pub(super) fn retry_path(path: &str, own_key: bool) -> Cow<'_, str> {
    let (bare, query) = path.split_at(path.find('?').unwrap_or(path.len()));
    let endpoint = livecheck_wire::endpoint("POST", path);
    match endpoint.as_ref().map(|e| e.api) {
        Some(Api::Gemini) => return super::gemini::retry_path(path, own_key),
        Some(Api::Converse) => return super::converse::retry_path(path),
        _ => {}
    }
    let not_streamed = match endpoint.map(|e| e.platform) {
        Some(Platform::Vertex) => bare
            .strip_suffix(STREAMED)
            .map(|model| format!("{model}{NOT_STREAMED}{query}")),
        Some(Platform::Bedrock) => bare
            .strip_suffix(BEDROCK_STREAMED)
            .map(|model| format!("{model}{BEDROCK_NOT_STREAMED}{query}")),
        _ => None,
    };
    not_streamed.map_or(Cow::Borrowed(path), Cow::Owned)
}

/// The upstream's own key, which the retry carries in place of the caller's credentials; `None`:
/// the caller's go as they came. A path the caller signs (Bedrock) cannot go without one.
pub(super) fn own_key<'a>(
    upstream: &'a Upstream,
    path: &str,
) -> Result<Option<&'a Secret>, Failure> {
    let signed =
        livecheck_wire::endpoint("POST", path).is_some_and(|e| e.platform == Platform::Bedrock);
    match &upstream.api_key {
        None if signed => Err(Failure::SignedByCaller),
        key => Ok(key.as_ref()),
    }
}

/// The header the upstream's own key goes in: the Gemini API's `x-goog-api-key` (an API key, which
/// Google does not take as a bearer token), else `Authorization: Bearer` (a Bedrock API key, an
/// OpenAI or Azure key behind a gateway).
pub(super) fn own_key_header(path: &str, key: &Secret) -> (&'static str, String) {
    let google =
        livecheck_wire::endpoint("POST", path).is_some_and(|e| e.platform == Platform::Google);
    if google {
        ("x-goog-api-key", key.expose().to_owned())
    } else {
        ("authorization", format!("Bearer {}", key.expose()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::Url;

    use super::*;

    const VERTEX: &str =
        "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514";
    const BEDROCK: &str = "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke";

    fn upstream(key: Option<&str>) -> Upstream {
        Upstream {
            name: "u".into(),
            base_url: Url::parse("https://bedrock-runtime.us-east-1.amazonaws.com").unwrap(),
            timeout: Duration::from_secs(1),
            api_key: key.map(Secret::new),
        }
    }

    #[test]
    fn a_streamed_request_is_asked_again_where_it_is_not_streamed() {
        assert_eq!(
            retry_path(&format!("{VERTEX}:streamRawPredict"), false),
            format!("{VERTEX}:rawPredict")
        );
        assert_eq!(
            retry_path(&format!("{VERTEX}:streamRawPredict?alt=sse"), false),
            format!("{VERTEX}:rawPredict?alt=sse")
        );
        assert_eq!(
            retry_path(
                "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke-with-response-stream",
                false
            ),
            BEDROCK
        );
        for path in [
            format!("{VERTEX}:rawPredict"),
            BEDROCK.to_owned(),
            "/v1/messages".to_owned(),
            // Not a Vertex path: left as it is (and refused as a target).
            "/v1/x:streamRawPredict".to_owned(),
        ] {
            assert_eq!(retry_path(&path, false), path);
        }
    }

    #[test]
    fn a_bedrock_retry_goes_only_with_the_upstreams_own_key() {
        assert_eq!(
            own_key(&upstream(None), BEDROCK),
            Err(Failure::SignedByCaller)
        );
        assert_eq!(
            own_key(&upstream(Some("k")), BEDROCK).map(|k| k.map(Secret::expose)),
            Ok(Some("k"))
        );
        // Vertex and the vendors' own paths reuse the caller's credentials unless the upstream
        // has a key of its own.
        for path in [format!("{VERTEX}:rawPredict"), "/v1/messages".to_owned()] {
            assert_eq!(own_key(&upstream(None), &path), Ok(None));
            assert!(own_key(&upstream(Some("k")), &path).unwrap().is_some());
        }
    }
}
