# Serves a fixed body as Google would, and reads it with google-genai (generate_content and a chat).
import http.server, json, sys, threading
from google import genai
from google.genai import types

BODIES = {}

class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = BODIES["current"]
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass

srv = http.server.HTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
client = genai.Client(api_key="dummy", http_options={"base_url": f"http://127.0.0.1:{srv.server_port}"})

for name in ["refusal", "withheld"]:
    BODIES["current"] = open(f"/tmp/gemini_{name}.json", "rb").read()
    r = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    print(name, "text:", repr(r.text))
    print(name, "finish_reason:", r.candidates[0].finish_reason, "prompt_feedback:", r.prompt_feedback)
    print(name, "function_calls:", r.function_calls, "usage:", r.usage_metadata.total_token_count, "id:", r.response_id)
    chat = client.chats.create(model="gemini-2.5-flash")
    r = chat.send_message("hi")
    print(name, "chat text:", repr(r.text), "curated history len:", len(chat.get_history(curated=True)))

# A part's proto name: does google-genai read `function_call` in an answer's part?
BODIES["current"] = json.dumps({"candidates": [{"content": {"role": "model", "parts": [
    {"function_call": {"name": "delete_all", "args": {"path": "/"}}}]}, "finishReason": "STOP"}]}).encode()
r = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
print("snake function_call read as:", r.function_calls)
# Both names in one part?
BODIES["current"] = json.dumps({"candidates": [{"content": {"role": "model", "parts": [
    {"functionCall": {"name": "a", "args": {}}, "function_call": {"name": "b", "args": {}}}]}}]}).encode()
try:
    r = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    print("both names read as:", r.function_calls)
except Exception as e:
    print("both names raise:", type(e).__name__, str(e)[:200])
# A blocked prompt as Google sends it.
BODIES["current"] = json.dumps({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}}).encode()
r = client.models.generate_content(model="gemini-2.5-flash", contents="hi")
print("google blocked prompt text:", repr(r.text), r.prompt_feedback.block_reason)
