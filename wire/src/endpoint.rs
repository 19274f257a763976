//! Which request paths livecheck reads, and what each path says beyond its body: one list, read by
//! the filter (what to check, what to refuse) and by the sidecar (where a retry may go).
//!
//! A path is read as a turn only when it is a `POST` to one of the endpoints below; everything
//! else is the filter's to refuse or pass ([`endpoint`] answers `None`). The query is ignored, and a
//! gateway may put a prefix before the vendor's path (`/openai/v1/responses`).
//!
//! | platform | path | API |
//! | --- | --- | --- |
//! | Anthropic | `…/v1/messages` | Messages |
//! | Anthropic | `…/v1/messages/batches` | Message Batches (create) |
//! | Anthropic | `…/v1/complete` | legacy Text Completions |
//! | OpenAI | `…/v1/chat/completions`, `…/v1/responses`, `…/v1/completions`, `…/v1/embeddings` | Chat, Responses, legacy Completions, Embeddings |
//! | Azure OpenAI | `…/openai/deployments/{deployment}/{chat/completions,completions,embeddings,responses}`, `…/openai/responses` | the same; the model is the deployment |
//! | Vertex AI | `…/publishers/anthropic/models/{model}:rawPredict`, `:streamRawPredict` | Messages; the model in the path |
//! | Bedrock | `…/model/{model}/invoke`, `…/model/{model}/invoke-with-response-stream` | Messages (the stream in AWS event-stream `chunk` messages); the model in the path |
//! | Bedrock | `…/model/{model}/converse`, `…/model/{model}/converse-stream` | Converse; the model in the path |
//! | Gemini API | `…/{v1,v1beta}/models/{model}:generateContent`, `:streamGenerateContent` | Gemini; the model in the path |
//! | Vertex AI | `…/publishers/google/models/{model}:generateContent`, `:streamGenerateContent` | Gemini; the model in the path |
//!
//! Gemini's `:streamGenerateContent` answers server-sent events with `alt=sse` in the query, and
//! without it one JSON array sent piece by piece ([`Endpoint::json_array`]). Whether a Gemini
//! answer streams, and how, is its path's: never its body's.

use crate::Api;

/// Where a turn's request goes: what the platform changes about the vendor's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Platform {
    /// The vendor's own API (or a gateway that keeps its paths).
    #[default]
    Direct,
    /// Azure OpenAI: deployment paths, the `api-key` header, `api-version` in the query.
    Azure,
    /// Anthropic's models on Google Vertex AI (`rawPredict`, `streamRawPredict`).
    Vertex,
    /// Anthropic's models on Amazon Bedrock (`invoke`): requests are signed by the caller (SigV4
    /// over the body), so a retry needs the sidecar's own credentials.
    Bedrock,
    /// Google's Gemini API (`generativelanguage.googleapis.com`): the caller's key in
    /// `x-goog-api-key` (or `?key=`), never the judge backends'.
    Google,
}

/// A request path livecheck reads: its API and what the path says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub api: Api,
    pub platform: Platform,
    /// The model the path names (an Azure deployment, a Vertex or Bedrock model id, percent-decoded).
    pub model: Option<String>,
    /// Whether the answer streams, when the path decides it (Bedrock `invoke`: never).
    pub stream: Option<bool>,
    /// The answer streams as one JSON array sent piece by piece, not as server-sent events
    /// (Gemini's `:streamGenerateContent` without `alt=sse`).
    pub json_array: bool,
}

impl Endpoint {
    fn direct(api: Api) -> Self {
        Self {
            api,
            platform: Platform::Direct,
            model: None,
            stream: None,
            json_array: false,
        }
    }
}

/// The endpoint a request calls, from its method and `:path`; `None`: not a request livecheck
/// reads.
pub fn endpoint(method: &str, path: &str) -> Option<Endpoint> {
    if method != "POST" {
        return None;
    }
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let path = path.split('#').next().unwrap_or(path);
    let query = query.split('#').next().unwrap_or(query);
    let path = path.strip_suffix('/').unwrap_or(path);
    direct(path)
        .map(Endpoint::direct)
        .or_else(|| azure(path))
        .or_else(|| vertex(path))
        .or_else(|| bedrock(path))
        .or_else(|| gemini(path, query))
}

/// The vendors' own paths, by suffix.
fn direct(path: &str) -> Option<Api> {
    [
        ("/v1/messages", Api::AnthropicMessages),
        ("/v1/messages/batches", Api::MessageBatches),
        ("/v1/complete", Api::AnthropicComplete),
        ("/v1/chat/completions", Api::ChatCompletions),
        ("/v1/responses", Api::Responses),
        ("/v1/completions", Api::Completions),
        ("/v1/embeddings", Api::Embeddings),
    ]
    .into_iter()
    .find(|(suffix, _)| path.ends_with(suffix))
    .map(|(_, api)| api)
}

/// `…/openai/deployments/{deployment}/{operation}`, and `…/openai/responses` (the model in the body).
fn azure(path: &str) -> Option<Endpoint> {
    if path.ends_with("/openai/responses") {
        return Some(Endpoint {
            platform: Platform::Azure,
            ..Endpoint::direct(Api::Responses)
        });
    }
    let (_, rest) = path.rsplit_once("/openai/deployments/")?;
    let (deployment, operation) = rest.split_once('/')?;
    let api = match operation {
        "chat/completions" => Api::ChatCompletions,
        "completions" => Api::Completions,
        "embeddings" => Api::Embeddings,
        "responses" => Api::Responses,
        _ => return None,
    };
    Some(Endpoint {
        api,
        platform: Platform::Azure,
        model: Some(model_segment(deployment)?),
        stream: None,
        json_array: false,
    })
}

/// `…/publishers/anthropic/models/{model}:rawPredict` or `:streamRawPredict` (Vertex's token
/// counting, the model `count-tokens`, makes no model generate: not a turn).
fn vertex(path: &str) -> Option<Endpoint> {
    let (_, rest) = path.rsplit_once("/publishers/anthropic/models/")?;
    let (model, method) = rest.rsplit_once(':')?;
    if !matches!(method, "rawPredict" | "streamRawPredict") || model == "count-tokens" {
        return None;
    }
    Some(Endpoint {
        api: Api::AnthropicMessages,
        platform: Platform::Vertex,
        model: Some(model_segment(model)?),
        stream: None,
        json_array: false,
    })
}

/// `…/model/{model}/invoke` and `/invoke-with-response-stream` (Anthropic's Messages; the stream's
/// events each base64 in an AWS event-stream `chunk` message), `/converse` and `/converse-stream`
/// (Converse, the stream in AWS event-stream framing).
fn bedrock(path: &str) -> Option<Endpoint> {
    let (rest, operation) = path.rsplit_once('/')?;
    let (api, stream) = match operation {
        "invoke" => (Api::AnthropicMessages, false),
        "invoke-with-response-stream" => (Api::AnthropicMessages, true),
        "converse" => (Api::Converse, false),
        "converse-stream" => (Api::Converse, true),
        _ => return None,
    };
    let (_, model) = rest.rsplit_once("/model/")?;
    Some(Endpoint {
        api,
        platform: Platform::Bedrock,
        model: Some(model_segment(model)?),
        stream: Some(stream),
        json_array: false,
    })
}

/// Gemini's `…/models/{model}:generateContent` and `:streamGenerateContent`, on the Gemini API
/// (`/v1/` or `/v1beta/` before `models/`) or on Vertex AI (`…/publishers/google/models/`: any
/// project and location, or none in express mode). A stream comes as server-sent events with
/// `alt=sse` in the query (as google-genai always asks: `models.py`), as one JSON array sent piece
/// by piece without it or with `alt=json` (Google's default); any other `alt` (`alt=proto`) is not
/// read.
fn gemini(path: &str, query: &str) -> Option<Endpoint> {
    let (before, rest) = path.rsplit_once("/models/")?;
    let (model, method) = rest.rsplit_once(':')?;
    // `alt` is a system parameter of Google's APIs, also written `$alt`; `json` is its default
    // (<https://cloud.google.com/apis/docs/system-parameters>). Named twice: not read.
    let mut alts = query
        .split('&')
        .filter_map(|p| p.strip_prefix("alt=").or_else(|| p.strip_prefix("$alt=")));
    let (stream, json_array) = match (method, alts.next(), alts.next()) {
        ("generateContent", _, _) => (false, false),
        ("streamGenerateContent", Some("sse"), None) => (true, false),
        ("streamGenerateContent", None | Some("json"), None) => (true, true),
        _ => return None,
    };
    let platform = if before.ends_with("/publishers/google") {
        Platform::Vertex
    } else if before.ends_with("/v1") || before.ends_with("/v1beta") {
        Platform::Google
    } else {
        return None;
    };
    Some(Endpoint {
        api: Api::Gemini,
        platform,
        model: Some(model_segment(model)?),
        stream: Some(stream),
        json_array,
    })
}

/// One path segment naming a model, percent-decoded; `None` when empty, holding a `/` as written,
/// or not UTF-8 once decoded. A `/` written `%2F` is part of the model: Bedrock's inference-profile
/// and prompt ARNs hold one, and the SDKs encode the whole id as one segment.
fn model_segment(segment: &str) -> Option<String> {
    if segment.is_empty() || segment.contains('/') {
        return None;
    }
    let mut out = Vec::with_capacity(segment.len());
    let mut rest = segment;
    while let Some((before, after)) = rest.split_once('%') {
        out.extend_from_slice(before.as_bytes());
        let hex = after.get(..2)?;
        out.push(u8::from_str_radix(hex, 16).ok()?);
        rest = after.get(2..)?;
    }
    out.extend_from_slice(rest.as_bytes());
    let model = String::from_utf8(out).ok()?;
    (!model.is_empty()).then_some(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(path: &str) -> Option<Api> {
        endpoint("POST", path).map(|e| e.api)
    }

    #[test]
    fn the_vendors_paths_are_read_by_suffix_with_any_query() {
        assert_eq!(api("/v1/messages"), Some(Api::AnthropicMessages));
        assert_eq!(api("/v1/messages?beta=true"), Some(Api::AnthropicMessages));
        assert_eq!(api("/v1/messages/batches"), Some(Api::MessageBatches));
        assert_eq!(api("/v1/complete"), Some(Api::AnthropicComplete));
        assert_eq!(api("/v1/chat/completions/"), Some(Api::ChatCompletions));
        assert_eq!(api("/openai/v1/responses"), Some(Api::Responses));
        assert_eq!(api("/v1/completions"), Some(Api::Completions));
        assert_eq!(api("/v1/embeddings"), Some(Api::Embeddings));
        assert_eq!(endpoint("GET", "/v1/messages"), None);
        assert_eq!(endpoint("post", "/v1/messages"), None);
    }

    #[test]
    fn paths_that_make_no_model_generate_or_are_not_read_yet_are_not_endpoints() {
        for path in [
            "/v1/messages/count_tokens",
            "/v1/messages/batches/msgbatch_1/cancel",
            "/v1/responses/resp_1/cancel",
            "/v1/responses/input_tokens",
            "/v1/batches",
            "/v1/files",
            "/v1/models",
            "/openai/deployments/d/images/generations",
            "/v1/projects/p/locations/l/publishers/anthropic/models/count-tokens:rawPredict",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=proto",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&alt=sse",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=json&alt=sse",
            "/v1beta/models/gemini-2.5-flash:countTokens",
            "/v1beta/models/gemini-2.5-flash:embedContent",
            "/v1beta/tunedModels/t:generateContent",
            "/v1/projects/p/locations/l/publishers/meta/models/llama:generateContent",
            "/v1/made-up",
        ] {
            assert_eq!(endpoint("POST", path), None, "{path}");
        }
    }

    #[test]
    fn azure_deployments_name_the_model() {
        let e = endpoint(
            "POST",
            "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21",
        );
        assert_eq!(
            e,
            Some(Endpoint {
                api: Api::ChatCompletions,
                platform: Platform::Azure,
                model: Some("gpt-4o-prod".into()),
                stream: None,
                json_array: false,
            })
        );
        assert_eq!(
            api("/openai/deployments/d/completions"),
            Some(Api::Completions)
        );
        assert_eq!(
            api("/openai/deployments/d/embeddings"),
            Some(Api::Embeddings)
        );
        assert_eq!(api("/openai/deployments/d/responses"), Some(Api::Responses));
        let e = endpoint("POST", "/openai/responses?api-version=preview");
        assert_eq!(
            e.map(|e| (e.api, e.platform)),
            Some((Api::Responses, Platform::Azure))
        );
        assert_eq!(api("/openai/deployments//chat/completions"), None);
    }

    #[test]
    fn vertex_and_bedrock_name_the_model_in_the_path() {
        let e = endpoint(
            "POST",
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict",
        );
        assert_eq!(
            e.map(|e| (e.api, e.platform, e.model, e.stream)),
            Some((
                Api::AnthropicMessages,
                Platform::Vertex,
                Some("claude-sonnet-4@20250514".into()),
                None
            ))
        );
        let e = endpoint(
            "POST",
            "/model/us.anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke",
        );
        assert_eq!(
            e.map(|e| (e.api, e.platform, e.model, e.stream)),
            Some((
                Api::AnthropicMessages,
                Platform::Bedrock,
                Some("us.anthropic.claude-3-5-sonnet-20240620-v1:0".into()),
                Some(false)
            ))
        );
        let arn = "arn:aws:bedrock:us-east-1:111122223333:inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0";
        let e = endpoint(
            "POST",
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A111122223333%3Ainference-profile%2Fus.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke",
        );
        assert_eq!(e.and_then(|e| e.model).as_deref(), Some(arn));
        let e = endpoint(
            "POST",
            "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke-with-response-stream",
        );
        assert_eq!(
            e.map(|e| (e.api, e.platform, e.model, e.stream)),
            Some((
                Api::AnthropicMessages,
                Platform::Bedrock,
                Some("anthropic.claude-3-5-sonnet-20240620-v1:0".into()),
                Some(true)
            ))
        );
        assert_eq!(api("/model/m/invoke-with-response-streams"), None);
        // A `/` as written is no model id's: not read, so refused by the fail-closed default.
        assert_eq!(api("/model/a/b/invoke"), None);
    }

    #[test]
    fn converse_paths_name_the_model_and_whether_the_answer_streams() {
        for (path, stream) in [
            ("/model/amazon.nova-pro-v1%3A0/converse", false),
            ("/model/amazon.nova-pro-v1%3A0/converse-stream", true),
        ] {
            let e = endpoint("POST", path);
            assert_eq!(
                e.map(|e| (e.api, e.platform, e.model, e.stream)),
                Some((
                    Api::Converse,
                    Platform::Bedrock,
                    Some("amazon.nova-pro-v1:0".into()),
                    Some(stream)
                ))
            );
        }
        // boto3 encodes an ARN model id as one segment (botocore's service model: `modelId`).
        let e = endpoint(
            "POST",
            "/model/arn%3Aaws%3Abedrock%3Aeu-west-1%3A123456789012%3Aprompt%2FPROMPT12345%3A1/converse",
        );
        assert_eq!(
            e.and_then(|e| e.model),
            Some("arn:aws:bedrock:eu-west-1:123456789012:prompt/PROMPT12345:1".into())
        );
        assert_eq!(api("/model/a/b/converse"), None);
        assert_eq!(api("/model//converse-stream"), None);
        assert_eq!(api("/model/m/converse-streams"), None);
    }

    #[test]
    fn gemini_paths_name_the_model_and_how_the_answer_streams() {
        let read = |path| {
            endpoint("POST", path).map(|e| (e.api, e.platform, e.model, e.stream, e.json_array))
        };
        let gemini = |platform, stream, json_array| {
            Some((
                Api::Gemini,
                platform,
                Some("gemini-2.5-flash".to_owned()),
                Some(stream),
                json_array,
            ))
        };
        for (path, platform, stream, json_array) in [
            ("/v1beta/models/gemini-2.5-flash:generateContent", Platform::Google, false, false),
            ("/v1/models/gemini-2.5-flash:generateContent?key=k", Platform::Google, false, false),
            ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", Platform::Google, true, false),
            ("/gw/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=k&alt=sse", Platform::Google, true, false),
            ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?$alt=sse", Platform::Google, true, false),
            ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", Platform::Google, true, true),
            ("/v1/models/gemini-2.5-flash:streamGenerateContent?key=k", Platform::Google, true, true),
            ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=json", Platform::Google, true, true),
            ("/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent", Platform::Vertex, false, false),
            ("/v1beta1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse", Platform::Vertex, true, false),
            ("/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent", Platform::Vertex, true, true),
        ] {
            assert_eq!(read(path), gemini(platform, stream, json_array), "{path}");
        }
        assert_eq!(api("/model/%zz/invoke"), None);
    }
}
