//! Request and answer bodies the vendor tests read, in each vendor's documented shape.

pub const ANTHROPIC_REQUEST: &str = r#"{
  "model": "claude-sonnet-4-5",
  "max_tokens": 1024,
  "system": [{"type": "text", "text": "You answer questions about orders."}],
  "messages": [
    {"role": "user", "content": "Where is order 17?"},
    {"role": "assistant", "content": [
      {"type": "text", "text": "Let me look that up, my password is hunter2."},
      {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"order": 17}}
    ]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped, password secret"},
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "cGFzc3dvcmQ="}},
      {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "password file"}},
      {"type": "text", "text": "And when does it arrive?"}
    ]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "tomorrow"}]}
    ]}
  ],
  "stream": true
}"#;

pub const ANTHROPIC_ANSWER_TEXT: &str = r#"{
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5",
  "content": [
    {"type": "thinking", "thinking": "the IBAN is NL91ABNA0417164300", "signature": "sig"},
    {"type": "text", "text": "Your order "},
    {"type": "text", "text": "ships tomorrow."}
  ],
  "stop_reason": "end_turn",
  "stop_sequence": null,
  "usage": {"input_tokens": 12, "output_tokens": 6}
}"#;

pub const ANTHROPIC_ANSWER_TOOL: &str = r#"{
  "id": "msg_01Tool",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5",
  "content": [
    {"type": "text", "text": "Sending it now."},
    {"type": "tool_use", "id": "toolu_1", "name": "pay",
     "input": {"iban": "NL91ABNA0417164300", "amount": 12345678901234567890123, "urgent": true,
               "note": null, "lines": ["a\nb", 1.50]}},
    {"type": "tool_use", "id": "toolu_2", "name": "noop", "input": {}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 20, "output_tokens": 30}
}"#;

pub const CHAT_REQUEST: &str = r#"{
  "model": "gpt-4.1-mini",
  "messages": [
    {"role": "system", "content": "You answer questions about orders."},
    {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [
      {"type": "text", "text": "Where is order 17?"},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,cGFzc3dvcmQ="}},
      {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
      {"type": "file", "file": {"file_data": "password", "filename": "p.txt"}}
    ]},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"password\":1}"}}
    ]},
    {"role": "tool", "tool_call_id": "call_1", "content": "the password is hunter2"},
    {"role": "function", "name": "legacy", "content": "password"}
  ],
  "stream": true,
  "stream_options": {"include_usage": true}
}"#;

pub const CHAT_ANSWER_TOOL: &str = r#"{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-mini-2025-04-14",
  "choices": [
    {"index": 0,
     "message": {"role": "assistant", "content": "Paying now.", "refusal": null, "annotations": [],
       "tool_calls": [
         {"id": "call_1", "type": "function",
          "function": {"name": "pay", "arguments": "{\"iban\": \"NL91ABNA0417164300\", \"amount\": 1e2, \"ok\": false}"}},
         {"id": "call_2", "type": "function",
          "function": {"name": "raw", "arguments": "not json at all"}},
         {"id": "call_3", "type": "custom", "custom": {"name": "shell", "input": "echo {\"x\": 1}"}}
       ]},
     "logprobs": {"content": [{"token": "Paying", "logprob": -0.1, "bytes": [80], "top_logprobs": []}]},
     "finish_reason": "tool_calls"},
    {"index": 1,
     "message": {"role": "assistant", "content": " Second choice.", "refusal": null, "annotations": []},
     "logprobs": null,
     "finish_reason": "stop"}
  ],
  "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29},
  "system_fingerprint": "fp_1"
}"#;

pub const RESPONSES_REQUEST: &str = r#"{
  "model": "gpt-4.1",
  "instructions": "You answer questions about orders.",
  "prompt": {"id": "pmpt_1", "version": "2", "variables": {
    "customer": "Ada",
    "topic": {"type": "input_text", "text": "refunds"},
    "photo": {"type": "input_image", "image_url": "https://example.com/password.png"},
    "contract": {"type": "input_file", "file_id": "file_password"}
  }},
  "input": [
    {"role": "developer", "content": "Be brief."},
    {"type": "message", "role": "user", "content": [
      {"type": "input_text", "text": "Where is order 17?"},
      {"type": "input_image", "image_url": "data:image/png;base64,cGFzc3dvcmQ="},
      {"type": "input_file", "filename": "p.txt", "file_data": "password"}
    ]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "password?"}]},
    {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{\"password\":1}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "the password is hunter2"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "password"}]}
  ],
  "background": true
}"#;

pub const RESPONSES_ANSWER: &str = r#"{
  "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
  "object": "response",
  "created_at": 1741476542,
  "status": "completed",
  "error": null,
  "incomplete_details": null,
  "instructions": null,
  "model": "gpt-4.1-2025-04-14",
  "output": [
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "NL91ABNA0417164300"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "order 17 status"}},
    {"type": "message", "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e6", "status": "completed",
     "role": "assistant", "content": [
       {"type": "output_text", "text": "Your order ", "annotations": []},
       {"type": "refusal", "refusal": "no"},
       {"type": "output_text", "text": "ships tomorrow.", "annotations": []}
     ]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "pay",
     "arguments": "{\"iban\":\"NL91ABNA0417164300\",\"amount\":12}", "status": "completed"}
  ],
  "parallel_tool_calls": true,
  "tool_choice": "auto",
  "tools": [{"type": "function", "name": "pay", "parameters": {"type": "object"}, "strict": true}],
  "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 123},
  "output_text": "Your order ships tomorrow."
}"#;

pub const RESPONSES_ANSWER_HOSTED_ONLY: &str = r#"{
  "id": "resp_2",
  "object": "response",
  "status": "completed",
  "output": [
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "weather"}},
    {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}]}
  ]
}"#;
