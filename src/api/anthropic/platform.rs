//! The Messages API behind Google Vertex AI (`…/publishers/anthropic/models/{model}:rawPredict`,
//! `:streamRawPredict`) and Amazon Bedrock (`/model/{model}/invoke`): the same body, less `model`
//! (the path names it) and with `anthropic_version` (the platform's API version, a string such as
//! `vertex-2023-10-16` or `bedrock-2023-05-31`). On Bedrock the path decides the stream: `invoke`
//! never streams, `invoke-with-response-stream` streams in AWS event-stream chunks
//! (`stream::chunks`); the SDK never sends `stream` in the body, so a body asking for a stream
//! is refused rather than its answer misread.

use crate::api::Platform;
use crate::json::{FieldError, Node, Obj};

/// What the platform asks of a Messages body beyond the API's own fields.
pub(in crate::api) fn read(body: &Obj<'_>, platform: Platform) -> Result<(), FieldError> {
    if !matches!(platform, Platform::Vertex | Platform::Bedrock) {
        return Ok(());
    }
    if !matches!(body.get("anthropic_version"), Some(Node::Str(_))) {
        return Err(FieldError::must_be("anthropic_version", "a string"));
    }
    if platform == Platform::Bedrock && body.bool_field("stream")? {
        return Err(FieldError::must_be(
            "stream",
            "false on Bedrock's invoke, which never streams",
        ));
    }
    Ok(())
}

/// Whether the caller signed header `name` (lower case) with SigV4: an `authorization` of
/// `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=a;b;c, Signature=…` that lists it. Such a header
/// must reach the upstream as the caller wrote it, or the signature no longer matches.
pub fn signed_header(authorization: Option<&str>, name: &str) -> bool {
    let Some(rest) = authorization.and_then(|a| a.trim_start().strip_prefix("AWS4-HMAC-SHA256"))
    else {
        return false;
    };
    rest.split(',')
        .filter_map(|part| part.trim().strip_prefix("SignedHeaders="))
        .flat_map(|list| list.split(';'))
        .any(|h| h.trim().eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::signed_header;
    use crate::api::{endpoint, read_request, Endpoint};

    const VERTEX: &str =
        "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict";
    const BEDROCK: &str = "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/invoke";

    fn at(path: &str) -> Endpoint {
        endpoint("POST", path).unwrap()
    }

    #[test]
    fn a_platform_body_is_read_with_the_paths_model() {
        let body = br#"{"anthropic_version": "vertex-2023-10-16", "max_tokens": 9,
            "messages": [{"role": "user", "content": "my password"}], "stream": true}"#;
        let req = read_request(&at(VERTEX), body).unwrap();
        assert_eq!(req.model.as_deref(), Some("claude-sonnet-4@20250514"));
        assert_eq!(req.input_text, "my password");
        assert!(req.stream);
        let body = br#"{"anthropic_version": "bedrock-2023-05-31", "model": "other",
            "messages": [{"role": "user", "content": "hi"}]}"#;
        let req = read_request(&at(BEDROCK), body).unwrap();
        assert_eq!(
            req.model.as_deref(),
            Some("anthropic.claude-3-5-sonnet-20240620-v1:0")
        );
        assert!(!req.stream);
    }

    #[test]
    fn a_platform_body_without_a_string_anthropic_version_is_refused() {
        for path in [VERTEX, BEDROCK] {
            for body in [
                r#"{"messages": []}"#,
                r#"{"anthropic_version": 2023, "messages": []}"#,
                r#"{"anthropic_version": null, "messages": []}"#,
            ] {
                let err = read_request(&at(path), body.as_bytes()).unwrap_err();
                assert_eq!(
                    err.message(),
                    "anthropic_version must be a string",
                    "{path} {body}"
                );
            }
        }
        // The vendor's own path asks for none.
        assert!(read_request(&at("/v1/messages"), br#"{"messages": []}"#).is_ok());
    }

    #[test]
    fn bedrock_invoke_asking_for_a_stream_is_refused() {
        let body =
            br#"{"anthropic_version": "bedrock-2023-05-31", "stream": true, "messages": []}"#;
        let err = read_request(&at(BEDROCK), body).unwrap_err();
        assert_eq!(
            err.message(),
            "stream must be false on Bedrock's invoke, which never streams"
        );
        let body =
            br#"{"anthropic_version": "bedrock-2023-05-31", "stream": false, "messages": []}"#;
        assert!(read_request(&at(BEDROCK), body).is_ok());
    }

    #[test]
    fn a_sigv4_signed_header_is_found_in_its_signed_headers() {
        let auth = "AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws4_request, \
                    SignedHeaders=accept;accept-encoding;content-type;host;x-amz-date, Signature=ab";
        assert!(signed_header(Some(auth), "accept-encoding"));
        assert!(signed_header(Some(auth), "host"));
        assert!(!signed_header(Some(auth), "x-request-id"));
        assert!(!signed_header(
            Some("Bearer accept-encoding"),
            "accept-encoding"
        ));
        assert!(!signed_header(None, "accept-encoding"));
    }
}
