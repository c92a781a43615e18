#!/usr/bin/env python3
"""An OpenAI-compatible chat completions server on loopback standing in for OpenClaw's model.

Usage: mock_model.py LOG_FILE  -- prints "listening <port>" on stdout, then serves until killed.
Every request body is appended to LOG_FILE as one JSON line, with "_at" (epoch seconds, when it
arrived) and "_summary": true for a summary request, whose answer adds a line
{"_summary_done": <epoch seconds>, "_at": <its arrival>}. Replies depend on the newest user
message of the request:
  - "CALL_TOOL <name> <json args>" and no tool result after it yet: a call of that tool;
  - "OVERFLOW_ONCE" the first time it is seen with its marker word (m<digit>...): HTTP 400
    context_length_exceeded (as OpenAI says it);
  - a summary request (a message holding "<conversation>", as clawctx's summarizer asks): a
    short summary, after MOCK_SUMMARY_DELAY_S seconds (default 0; set it for a slow summarizer);
  - otherwise a short text naming the turn ("reply to <marker>: <first words>"), the marker
    being the prompt's first word shaped m<digit>... .
Streaming (stream: true) answers as server-sent events, as OpenAI does.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOG = sys.argv[1]
LOCK = threading.Lock()
SEEN_OVERFLOW = set()
SUMMARY_DELAY_S = float(os.environ.get("MOCK_SUMMARY_DELAY_S") or 0)


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def is_summary(body):
    return any("<conversation>" in text_of(m.get("content")) for m in body.get("messages") or [])


def decide(body):
    msgs = body.get("messages") or []
    if is_summary(body):
        time.sleep(SUMMARY_DELAY_S)
        return ("text", "Summary (mock): the conversation so far, in short.")
    last_user = None
    for i, m in enumerate(msgs):
        # OpenClaw adds its own context as a user message after the prompt: skip it.
        if m.get("role") == "user" and not text_of(m.get("content")).startswith("<<<BEGIN_OPENCLAW_INTERNAL"):
            last_user = i
    if last_user is None:
        return ("text", "reply to: (no user message)")
    text = text_of(msgs[last_user].get("content"))
    answered = any(m.get("role") == "tool" for m in msgs[last_user + 1:])
    for line in text.splitlines():
        if line.startswith("CALL_TOOL ") and not answered:
            _, name, args = line.split(" ", 2)
            return ("tool", name, args)
    # The turn's marker word (m<digit>...), named in every reply so a test can find the turn.
    marker = next((w for w in text.split() if w.startswith("m") and w[1:2].isdigit()), "")
    if "OVERFLOW_ONCE" in text:
        # Once per marker: the retry after the host's compaction carries the same prompt,
        # maybe reworded around it.
        with LOCK:
            if (marker or text) not in SEEN_OVERFLOW:
                SEEN_OVERFLOW.add(marker or text)
                return ("overflow",)
    if answered:
        result = [m for m in msgs[last_user + 1:] if m.get("role") == "tool"][-1]
        return ("text", "tool answered %s: %s" % (marker, text_of(result.get("content"))[:400]))
    return ("text", "reply to %s: %s" % (marker, " ".join(text.split()[:8])))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, payload, ctype="application/json"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self.send(200, {"object": "list", "data": [{"id": "mock-1", "object": "model"}]})
        else:
            self.send(404, {"error": {"message": "not found"}})

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw)
        except ValueError:
            self.send(400, {"error": {"message": "not JSON"}})
            return
        logged = dict(body, _at=time.time())
        if is_summary(body):
            logged["_summary"] = True
        with LOCK:
            with open(LOG, "a") as f:
                f.write(json.dumps(logged) + "\n")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send(404, {"error": {"message": "not found: " + self.path}})
            return
        d = decide(body)
        if logged.get("_summary"):
            # When the summary is answered: a test sees whether an output waited for it.
            with LOCK:
                with open(LOG, "a") as f:
                    f.write(json.dumps({"_summary_done": time.time(), "_at": logged["_at"]}) + "\n")
        if d[0] == "overflow":
            self.send(400, {"error": {
                "message": "This model's maximum context length is 40000 tokens. However, your messages resulted in 47000 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
            return
        if d[0] == "tool":
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_%d" % (abs(hash(d[2])) % 100000), "type": "function",
                 "function": {"name": d[1], "arguments": d[2]}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": d[1]}
            finish = "stop"
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        if body.get("stream"):
            delta = dict(message)
            if delta.get("tool_calls"):
                delta["tool_calls"] = [dict(tc, index=0) for tc in delta["tool_calls"]]
            chunks = [
                {"id": "c1", "object": "chat.completion.chunk", "model": body.get("model", "mock-1"),
                 "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {"id": "c1", "object": "chat.completion.chunk", "model": body.get("model", "mock-1"),
                 "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
            ]
            data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
            self.send(200, data, "text/event-stream")
        else:
            self.send(200, {"id": "c1", "object": "chat.completion", "model": body.get("model", "mock-1"),
                            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                            "usage": usage})


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
