//! The reference readings of the input-only APIs: embeddings' `input`, and a Message Batch read as
//! each of its requests' Messages reading, joined.

use serde_json::Value;

use super::{joined, opt_str, reference, Read};
use livecheck::api::Api;

/// Embeddings: `input` is a string or an array of strings (tokens are refused), one user message;
/// an embeddings request never streams, whatever it says.
pub(super) fn embeddings(body: &Value) -> Result<Read, ()> {
    let texts: Vec<String> = match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned).ok_or(()))
            .collect::<Result<_, _>>()?,
        _ => return Err(()),
    };
    let text = joined(&texts);
    Ok(Read {
        input_text: text.clone(),
        last_user_text: text.clone(),
        intent: if text.is_empty() { vec![] } else { vec![text] },
        model: opt_str(body, "model")?,
        stream: false,
    })
}

/// A Message Batch: every request a `custom_id` string and Messages `params`; the batch's text is
/// its requests' texts joined, it has no user message of its own, its model is the one every
/// request names, and it never streams.
pub(super) fn message_batches(body: &Value) -> Result<Read, ()> {
    let mut texts = Vec::new();
    let mut models = Vec::new();
    for request in body.get("requests").and_then(Value::as_array).ok_or(())? {
        request.get("custom_id").and_then(Value::as_str).ok_or(())?;
        let params = request.get("params").filter(|p| p.is_object()).ok_or(())?;
        let read = reference(Api::AnthropicMessages, params)?;
        texts.push(read.input_text);
        models.push(read.model);
    }
    let model = match models.split_first() {
        Some((Some(first), rest)) if rest.iter().all(|m| m.as_ref() == Some(first)) => {
            Some(first.clone())
        }
        _ => None,
    };
    Ok(Read {
        input_text: joined(&texts),
        last_user_text: String::new(),
        intent: Vec::new(),
        model,
        stream: false,
    })
}
