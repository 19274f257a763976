//! Streams the rewriter tests read, in each vendor's documented shape. The rules are
//! `NL\d{2}[A-Z]{4}\d{10}` (max_match 18) and `not_contains: "password"`; `\u0041` is `A`,
//! `\u0030` is `0`, `\u0077` is `w`.

pub const POLICY: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
  "blocked_reply": "Sorry, I can't share that.",
  "live_checks": [
    {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
     "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18},
    {"name": "no-passwords", "stage": "output", "kind": "not_contains", "expected": "password"}
  ]}}}}}"#;

/// A judged check beside the rules: the answer text is held whole.
pub const POLICY_JUDGED: &str = r#"{"default_agent": "a", "agents": {"a": {"published": "1", "versions": {"1": {
  "blocked_reply": "Sorry, I can't share that.",
  "live_checks": [
    {"name": "no-iban", "stage": "output", "kind": "matches_pattern",
     "pattern": "NL\\d{2}[A-Z]{4}\\d{10}", "max_match": 18},
    {"name": "polite", "stage": "output", "kind": "polite_tone"}
  ]}}}}}"#;

pub const ANTHROPIC_IBAN_ACROSS_EVENTS: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}

event: ping
data: {"type":"ping"}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Look up the account."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Pay é日本 to N"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"L91\u0041BNA04"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"17164300 😀 today."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":20}}

event: message_stop
data: {"type":"message_stop"}

"#;

pub const ANTHROPIC_WORD_BESIDE_TOOL: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Setting 日本 your pass"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"wor\u0064 😀 now."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"set","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"user\": \"é\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":30}}

event: message_stop
data: {"type":"message_stop"}

"#;

pub const ANTHROPIC_IBAN_IN_TOOL: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_3","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Sending it, é."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"pay","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"to\": \"é日"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"本\", \"iban\": \"NL91AB"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"NA\\u00304171"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"64300\", \"amount\": 12}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":40}}

event: message_stop
data: {"type":"message_stop"}

"#;

pub const ANTHROPIC_CLEAN: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_4","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Your IBAN NL91 is é日本"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" safe 😀, no pass\u0077d."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"note","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"text\": \"pass\", \"n\": 1}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":25}}

event: message_stop
data: {"type":"message_stop"}

"#;

pub const CHAT_IBAN_ACROSS_EVENTS: &str = r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"content":"Pay é日本 to N"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"content":"L91\u0041BNA04"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"content":"17164300 😀 today."},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}

data: [DONE]

"#;

pub const CHAT_WORD_BESIDE_TOOL: &str = r#"data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Setting 日本 your pass"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"content":"wor\u0064 😀 now."},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"set","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"user\": \"é\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}

data: [DONE]

"#;

pub const CHAT_IBAN_IN_TOOL: &str = r#"data: {"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Sending it, é."},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"pay","arguments":"{\"to\": \"é日"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"本\", \"iban\": \"NL91AB"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"NA\\u00304171"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"64300\", \"amount\": 12}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-3","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: [DONE]

"#;

/// Two choices (`n: 2`): each is its own text; the IBAN is in the second.
pub const CHAT_TWO_CHOICES: &str = r#"data: {"id":"chatcmpl-4","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"First: NL91"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-4","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":1,"delta":{"role":"assistant","content":"Second: NL91AB"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-4","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"content":" is a prefix."},"logprobs":null,"finish_reason":"stop"}]}

data: {"id":"chatcmpl-4","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":1,"delta":{"content":"NA0417164300 é"},"logprobs":null,"finish_reason":"stop"}]}

data: [DONE]

"#;

pub const CHAT_CLEAN: &str = r#"data: {"id":"chatcmpl-5","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Your IBAN NL91 is é日本"},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-5","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{"content":" safe 😀, no pass\u0077d."},"logprobs":null,"finish_reason":null}]}

data: {"id":"chatcmpl-5","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4.1-mini","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}

data: [DONE]

"#;

pub const RESPONSES_IBAN_ACROSS_EVENTS: &str = r#"event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"in_progress","error":null,"incomplete_details":null,"model":"gpt-4.1-mini","output":[],"usage":null}}

event: response.in_progress
data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"in_progress","error":null,"incomplete_details":null,"model":"gpt-4.1-mini","output":[],"usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}

event: response.reasoning_summary_text.delta
data: {"type":"response.reasoning_summary_text.delta","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Looking up."}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Looking up."}]}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":5,"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}

event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":6,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Pay é日本 to N","logprobs":[]}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":8,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"L91\u0041BNA04","logprobs":[]}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":9,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"17164300 😀 today.","logprobs":[]}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":10,"item_id":"msg_1","output_index":1,"content_index":0,"text":"Pay é日本 to NL91ABNA0417164300 😀 today.","logprobs":[]}

event: response.content_part.done
data: {"type":"response.content_part.done","sequence_number":11,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"Pay é日本 to NL91ABNA0417164300 😀 today.","annotations":[],"logprobs":[]}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":12,"output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Pay é日本 to NL91ABNA0417164300 😀 today.","annotations":[],"logprobs":[]}]}}

event: response.completed
data: {"type":"response.completed","sequence_number":13,"response":{"id":"resp_1","object":"response","created_at":1700000000,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-4.1-mini","output":[],"usage":{"input_tokens":9,"output_tokens":12,"total_tokens":21}}}

"#;

pub const RESPONSES_WORD_BESIDE_TOOL: &str = r#"event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_2","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-4.1-mini","output":[],"usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_2","type":"message","status":"in_progress","role":"assistant","content":[]}}

event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":2,"item_id":"msg_2","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_2","output_index":0,"content_index":0,"delta":"Setting 日本 your pass","logprobs":[]}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_2","output_index":0,"content_index":0,"delta":"wor\u0064 😀 now.","logprobs":[]}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":5,"item_id":"msg_2","output_index":0,"content_index":0,"text":"Setting 日本 your password 😀 now.","logprobs":[]}

event: response.content_part.done
data: {"type":"response.content_part.done","sequence_number":6,"item_id":"msg_2","output_index":0,"content_index":0,"part":{"type":"output_text","text":"Setting 日本 your password 😀 now.","annotations":[],"logprobs":[]}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"msg_2","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Setting 日本 your password 😀 now.","annotations":[],"logprobs":[]}]}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":8,"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"set","arguments":""}}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":9,"item_id":"fc_1","output_index":1,"delta":"{\"user\": \"é\"}"}

event: response.function_call_arguments.done
data: {"type":"response.function_call_arguments.done","sequence_number":10,"item_id":"fc_1","output_index":1,"arguments":"{\"user\": \"é\"}"}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":11,"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"set","arguments":"{\"user\": \"é\"}"}}

event: response.completed
data: {"type":"response.completed","sequence_number":12,"response":{"id":"resp_2","object":"response","created_at":1700000000,"status":"completed","model":"gpt-4.1-mini","output":[],"usage":{"input_tokens":9,"output_tokens":12,"total_tokens":21}}}

"#;

pub const RESPONSES_IBAN_IN_TOOL: &str = r#"event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_3","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-4.1-mini","output":[],"usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"pay","arguments":""}}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":2,"item_id":"fc_1","output_index":0,"delta":"{\"to\": \"é日"}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_1","output_index":0,"delta":"本\", \"iban\": \"NL91AB"}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":4,"item_id":"fc_1","output_index":0,"delta":"NA\\u00304171"}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"fc_1","output_index":0,"delta":"64300\", \"amount\": 12}"}

event: response.function_call_arguments.done
data: {"type":"response.function_call_arguments.done","sequence_number":6,"item_id":"fc_1","output_index":0,"arguments":"{\"to\": \"é日本\", \"iban\": \"NL91ABNA\\u00304171164300\", \"amount\": 12}"}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"pay","arguments":"{\"to\": \"é日本\", \"iban\": \"NL91ABNA\\u00304171164300\", \"amount\": 12}"}}

event: response.completed
data: {"type":"response.completed","sequence_number":8,"response":{"id":"resp_3","object":"response","created_at":1700000000,"status":"completed","model":"gpt-4.1-mini","output":[],"usage":{"input_tokens":9,"output_tokens":12,"total_tokens":21}}}

"#;

pub const RESPONSES_CLEAN: &str = r#"event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_4","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-4.1-mini","output":[],"usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_4","type":"message","status":"in_progress","role":"assistant","content":[]}}

event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":2,"item_id":"msg_4","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_4","output_index":0,"content_index":0,"delta":"Your IBAN NL91 is é日本","logprobs":[]}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_4","output_index":0,"content_index":0,"delta":" safe 😀, no pass\u0077d.","logprobs":[]}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":5,"item_id":"msg_4","output_index":0,"content_index":0,"text":"Your IBAN NL91 is é日本 safe 😀, no passwd.","logprobs":[]}

event: response.content_part.done
data: {"type":"response.content_part.done","sequence_number":6,"item_id":"msg_4","output_index":0,"content_index":0,"part":{"type":"output_text","text":"Your IBAN NL91 is é日本 safe 😀, no passwd.","annotations":[],"logprobs":[]}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"msg_4","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Your IBAN NL91 is é日本 safe 😀, no passwd.","annotations":[],"logprobs":[]}]}}

event: response.completed
data: {"type":"response.completed","sequence_number":8,"response":{"id":"resp_4","object":"response","created_at":1700000000,"status":"completed","model":"gpt-4.1-mini","output":[],"usage":{"input_tokens":9,"output_tokens":12,"total_tokens":21}}}

"#;

/// A sentence, then a tool call with clean arguments over two deltas.
pub const CHAT_TOOL_CALL: &str = r#"data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Sending it."},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"send","arguments":""}}]},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"to\": "}}]},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Bob\"}"}}]},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

"#;

/// A function call with clean arguments over two deltas.
pub const RESPONSES_TOOL_CALL: &str = r#"event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_t","object":"response","created_at":1,"status":"in_progress","model":"m","output":[]}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"send","arguments":""}}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":2,"item_id":"fc_1","output_index":0,"delta":"{\"to\": "}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_1","output_index":0,"delta":"\"Bob\"}"}

event: response.function_call_arguments.done
data: {"type":"response.function_call_arguments.done","sequence_number":4,"item_id":"fc_1","output_index":0,"arguments":"{\"to\": \"Bob\"}"}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":5,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"send","arguments":"{\"to\": \"Bob\"}"}}

event: response.completed
data: {"type":"response.completed","sequence_number":6,"response":{"id":"resp_t","object":"response","created_at":1,"status":"completed","model":"m","output":[{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"send","arguments":"{\"to\": \"Bob\"}"}],"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}}

"#;
