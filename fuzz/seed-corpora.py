#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ from the repo's own fixtures and docs.

Small, real-looking inputs: the protocol's message and call fixtures, the documented JSON-RPC
lines, the tiny LoCoMo fixture, configs in the README's shape. Run from anywhere; it replaces
what it writes and nothing else. What a fuzz run discovers is not committed (see
scripts/fuzz); these seeds are the starting point every run shares.
"""
import hashlib
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fuzz" / "corpus"
MESSAGES = json.loads((ROOT / "crates/protocol/tests/fixtures/messages.json").read_text())
CALLS = json.loads((ROOT / "crates/protocol/tests/fixtures/calls.json").read_text())


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


# --- config_json5: the README's configs, a gateway section, comments and trailing commas.
readme = (ROOT / "README.md").read_text()
for block in re.findall(r"```json5\n(.*?)```", readme, re.S):
    put("config_json5", block)
put("config_json5", """// openclaw.json
{
  gateway: { port: 18789, bind: "loopback", auth: { token: "t0ken", tokenEnv: 'GW_TOKEN' },
             http: { maxBodyBytes: 1048576, requestTimeoutMs: 120000, }, },
  plugins: { enabled: true, allow: ["lossless"], deny: [],
             entries: { lossless: { enabled: true, config: { databasePath: "lcm.db", durability: "full", } } },
             slots: { contextEngine: 'lossless' } },
  agents: { defaults: { compaction: { model: "local/small" }, contextTokens: 0x8000 } },
  /* block comment */ models: { mode: "merge", },
}
""")
put("config_json5", '{"plugins":{"slots":{"contextEngine":"legacy"}},"x":[1,2.5,-3e2,null,true,"\\u00e9"]}')
put("config_json5", "")
put("config_json5", "[1, 2]")

# --- transcript_jsonl (also the workload reader's input): a session with every entry kind.
def transcript(messages, torn=False):
    lines = [compact({"type": "session", "version": 3, "id": "0f9e", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"})]
    parent = None
    for i, m in enumerate(messages):
        eid = f"e{i:07x}"
        lines.append(compact({"type": "message", "id": eid, "parentId": parent, "timestamp": "2026-01-01T00:00:01.000Z", "message": m}))
        parent = eid
    return lines, parent

lines, parent = transcript(MESSAGES)
put("transcript_jsonl", "\n".join(lines) + "\n")
lines, parent = transcript(MESSAGES[:4])
lines.append(compact({"type": "compaction", "id": "c1", "parentId": parent, "timestamp": "2026-01-01T00:01:00.000Z",
                      "summary": "## Goal\nShip v1", "firstKeptEntryId": "e0000002", "tokensBefore": 1200,
                      "details": {"readFiles": ["src/a.rs"], "modifiedFiles": []}}))
lines.append(compact({"type": "branch_summary", "id": "b1", "parentId": "c1", "timestamp": "2026-01-01T00:02:00.000Z",
                      "fromId": "e0000001", "summary": "Tried approach A"}))
lines.append(compact({"type": "custom_message", "id": "m1", "parentId": "b1", "timestamp": "2026-01-01T00:03:00.000Z",
                      "customType": "reminder", "content": "stand-up", "display": True}))
lines.append(compact({"type": "label", "id": "l1", "parentId": "m1", "timestamp": "2026-01-01T00:04:00.000Z",
                      "targetId": "e0000001", "label": "start"}))
lines.append(compact({"type": "message", "id": "x1", "parentId": "e0000001", "timestamp": "2026-01-01T00:05:00.000Z",
                      "message": {"role": "user", "content": "a branch"}}))
put("transcript_jsonl", "\r\n".join(lines) + "\r\n")
put("transcript_jsonl", "\n".join(lines) + '\n{"type":"message","id":"torn","parentId":"x1","mes')
put("transcript_jsonl", lines[0] + "\n\n   \n" + lines[1])
for target in ("bench_workload",):
    lines, _ = transcript(MESSAGES)
    put(target, "\n".join(lines) + "\n")
    lines, _ = transcript([{"role": "user", "content": "q1"}, {"role": "assistant", "content": [{"type": "text", "text": "a1"}]},
                           {"role": "user", "content": "q2"}])
    put(target, "\n".join(lines) + "\n")

# --- plugin_rpc_frame: the protocol document's reply lines, host calls, and odd frames.
doc = (ROOT / "docs/plugin-protocol.md").read_text()
for line in re.findall(r"^← (\{.*\})\s*$", doc, re.M):
    put("plugin_rpc_frame", line)
for key in ("assembleResult", "compactResult", "commitTurnResult", "bootstrapResult", "ingestBatchResult", "maintainResult"):
    put("plugin_rpc_frame", '{"jsonrpc":"2.0","id":7,"result":' + compact(CALLS[key]) + "}")
put("plugin_rpc_frame", '{"jsonrpc":"2.0","id":3,"result":{"ingested":true},"error":null}')
put("plugin_rpc_frame", '{"jsonrpc":"2.0","id":1,"error":{"code":-32010,"message":"unknown message reference 4","data":{"ids":[4]}}}')
put("plugin_rpc_frame", '{"jsonrpc":"2.0","method":"host/log","params":{"level":"warn","message":"slow"}}')
put("plugin_rpc_frame", '{"jsonrpc":"2.0","id":"h1","method":"host/llm/complete","params":{"callId":"c1","messages":[{"role":"user","content":"sum"}],"maxTokens":64}}')
put("plugin_rpc_frame", '{"jsonrpc":"2.0","id":2,"id":3,"result":"dup \\"keys\\" [ ] { }"}')

# --- plugin_message_refs: <flags><messages>\n<reply>, @SENT@ = the array as sent.
sent = compact(MESSAGES[:4])
for flags in (b"\x00", b"\x01"):
    for reply in ('{"messages":@SENT@,"estimatedTokens":40}',
                  '{"messages":[{"role":"user","content":"summary of 1"},3],"estimatedTokens":40}',
                  '{"messages":[1,2],"estimatedTokens":4,"systemPromptAddition":"x"}',
                  '{"messages":[' + compact(MESSAGES[0]) + ',' + compact(MESSAGES[3]) + ']}',
                  '{"estimatedTokens":1,"messages":[]}'):
        put("plugin_message_refs", flags + (sent + "\n" + reply).encode())

# --- lossless_codec: messages as JSON, and raw columns <role><skeleton>\xff<text>.
for m in MESSAGES:
    put("lossless_codec", compact(m))
put("lossless_codec", compact({"role": "assistant", "content": [{"type": "toolCall", "id": "call_1", "name": "read",
                                                                "arguments": {"path": "src/main.rs"}}], "timestamp": 3}))
put("lossless_codec", b"\x01" + b'{"content":[{"type":"text","text":{"$t":-1}}]}' + b"\xff" + b"hello")
put("lossless_codec", b"\x03" + b'{"role":"custom","content":{"$t":5},"summary":{"$t":3}}' + b"\xff" + b"hello\nabc")
put("lossless_codec", b"\x02" + b'{"toolCallId":"c","content":[{"type":"toolCall","name":"f","arguments":{"$c":6}}]}' + b"\xff" + b"f({})")
put("lossless_codec", b"L\x05\x00\x00\x00Phello")

# --- bench_locomo: the tiny fixture and one sample of it.
locomo = (ROOT / "crates/bench/tests/fixtures/tiny-locomo.json").read_text()
put("bench_locomo", locomo)
put("bench_locomo", compact(json.loads(locomo)[:1]))

# --- gateway_chat: chat completion bodies.
for body in (
    {"model": "m", "messages": [{"role": "user", "content": "What is the weather in Paris?"}]},
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}], "stream": True,
     "stream_options": {"include_usage": True}, "user": "s1"},
    {"messages": [{"role": "user", "content": "Oslo and Rome?"}], "tools": [{"type": "function", "function": {"name": "weather",
        "description": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
     "tool_choice": {"type": "function", "function": {"name": "weather"}}, "temperature": 0.2, "top_p": 1, "max_tokens": 64,
     "stop": ["\n\n"], "seed": 7, "presence_penalty": 0, "frequency_penalty": 0, "n": 1},
    {"messages": [{"role": "user", "content": "Oslo?"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1",
        "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]},
):
    put("gateway_chat", compact(body))
put("gateway_chat", '{"messages":[]}')

# --- gateway_engine: <route index><body>, the order of ENGINE_ROUTES in the gateway's fuzzing module.
routes = ["bootstrap", "ingest", "ingestBatch", "assemble", "compact", "maintain", "afterTurn", "commitTurn",
          "onSubagentEnded", "prepareSubagentSpawn", "rollback", "lcm_grep", "lcm_describe", "lcm_expand"]
bodies = {
    "bootstrap": {"sessionId": "0f9e", "sessionKey": "agent:main:main", "sessionFile": "/s/0f9e.jsonl"},
    "ingest": {"sessionId": "0f9e", "message": MESSAGES[0]},
    "ingestBatch": {"sessionId": "0f9e", "messages": MESSAGES[:3]},
    "assemble": CALLS["assembleParams"],
    "compact": CALLS["compactParams"],
    "maintain": {"sessionId": "0f9e", "sessionFile": "/s/0f9e.jsonl"},
    "afterTurn": CALLS["afterTurnParams"],
    "commitTurn": CALLS["commitTurnParams"],
    "onSubagentEnded": CALLS["subagentEndedParams"],
    "prepareSubagentSpawn": CALLS["prepareSubagentSpawnParams"],
    "rollback": {"rollbackId": "1"},
    "lcm_grep": {"sessionKey": "agent:main:main", "query": "invoice", "mode": "any_term", "limit": 5},
    "lcm_describe": {"sessionKey": "agent:main:main", "id": "sum_1"},
    "lcm_expand": {"sessionKey": "agent:main:main", "id": "msg_3", "maxTokens": 100},
}
for i, r in enumerate(routes):
    put("gateway_engine", bytes([i]) + compact(bodies[r]).encode())
