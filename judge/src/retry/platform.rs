//! Recovery on the platforms that serve the Messages API under their own paths and credentials
//! (the paths are [`livecheck_wire::endpoint`]'s):
//!
//! - Google Vertex AI: the caller's `authorization: Bearer` is a Google access token, good for any
//!   request until it expires, so a retry reuses it; a streamed original (`:streamRawPredict`) is
//!   asked again at `:rawPredict`, since a retry is never streamed.
//! - Amazon Bedrock: the caller signs each request (SigV4 over the method, path, host and body),
//!   so a changed body cannot reuse its signature. A retry goes only when the upstream has a key of
//!   its own (`api_key_env`, a Bedrock API key sent as `Authorization: Bearer`); without one it
//!   fails with a fixed reason and the filter withholds the answer as without `recover`.
//!   A streamed original (`invoke-with-response-stream`) is asked again at `invoke`.
//!
//! An upstream's own key, on any platform, replaces the caller's credentials on the retry.

use std::borrow::Cow;

use livecheck_wire::Platform;

use super::Failure;
use crate::config::{Secret, Upstream};

const STREAMED: &str = ":streamRawPredict";
const NOT_STREAMED: &str = ":rawPredict";
const BEDROCK_STREAMED: &str = "/invoke-with-response-stream";
const BEDROCK_NOT_STREAMED: &str = "/invoke";

/// The path a retry asks at: the original's, but a Vertex `:streamRawPredict` is asked at
/// `:rawPredict` and a Bedrock `/invoke-with-response-stream` at `/invoke` (the query kept).
pub(super) fn retry_path(path: &str) -> Cow<'_, str> {
    let (bare, query) = path.split_at(path.find('?').unwrap_or(path.len()));
    let platform = livecheck_wire::endpoint("POST", path).map(|e| e.platform);
    let not_streamed = match platform {
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
            retry_path(&format!("{VERTEX}:streamRawPredict")),
            format!("{VERTEX}:rawPredict")
        );
        assert_eq!(
            retry_path(&format!("{VERTEX}:streamRawPredict?alt=sse")),
            format!("{VERTEX}:rawPredict?alt=sse")
        );
        assert_eq!(
            retry_path(
                "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke-with-response-stream"
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
            assert_eq!(retry_path(&path), path);
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
