"""The official Python MCP client (`pip install mcp`) against clawctx's MCP server.

Run by crates/cli/tests/mcp.rs (never on its own in CI):

    client.py check --word WORD [--expect-ingest] (--stdio CMD ARG... | --http URL [--token T])
    client.py refused --http URL [--token T]
    client.py bench --calls N --word WORD --stdio CMD ARG...

`check` lists the tools and resources and calls every tool against a prefilled store: grep in
its three modes (and their former names `fts`, `any`), scoped and unscoped, paged with the
continuation token; describe and expand of what grep found; sessions_list; context_assemble; the
summary resources; every input schema checked with `jsonschema` (valid for its draft, no format
the draft does not define) and returned for Ajv; bad arguments (a missing, unknown or mistyped
one must be JSON-RPC invalid_params, the others an MCP error, and the server must still answer
afterwards). It prints one JSON line
with what it saw and exits 0, or exits 1 naming the first check that failed.

`refused` expects the connection itself to be refused (HTTP without the gateway's token).

`bench` times every tool over one connection and prints per tool p50/p95/max in ms as JSON.
"""

import argparse
import json
import sys
import time

import anyio
import jsonschema
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

READ_ONLY_TOOLS = {"lcm_grep", "lcm_describe", "lcm_expand", "sessions_list", "context_assemble"}


class CheckFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True)


async def call(session, name, args):
    """A tool's JSON result (tool-level errors are failures here)."""
    r = dump(await session.call_tool(name, args))
    check(not r.get("isError"), f"{name}({args}) answered a tool error: {r}")
    texts = [c["text"] for c in r.get("content", []) if c.get("type") == "text"]
    check(len(texts) == 1, f"{name} answers one text block: {r}")
    check(len(texts[0]) <= 32_000, f"{name} stays under the result cap: {len(texts[0])} chars")
    return json.loads(texts[0])


async def mcp_error(session, name, args, what):
    """Calling `name` with `args` must be an MCP error (a JSON-RPC error, or a tool error)."""
    try:
        r = dump(await session.call_tool(name, args))
    except MCPError as e:
        return str(e)
    check(r.get("isError") is True, f"{what}: {name}({args}) must fail, got {r}")
    return json.dumps(r)


async def invalid_params(session, name, args, what):
    """Calling `name` with `args` must be the JSON-RPC error invalid_params (-32602), as the
    README promises for a missing, unknown or mistyped argument: not a tool result."""
    try:
        r = dump(await session.call_tool(name, args))
    except MCPError as e:
        check(e.code == INVALID_PARAMS, f"{what}: {name}({args}) must be invalid_params, got {e.code}: {e}")
        return str(e)
    raise CheckFailed(f"{what}: {name}({args}) must be a JSON-RPC invalid_params error, got a tool result {r}")


def formats_in(schema):
    """Every `format` keyword in `schema`."""
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "format" and isinstance(v, str):
                yield v
            else:
                yield from formats_in(v)
    elif isinstance(schema, list):
        for v in schema:
            yield from formats_in(v)


def check_schema(name, schema):
    """A tool's input schema is valid JSON Schema for its draft and uses no `format` the
    draft does not define (schemars' `uint32`, `uint64`... are refused by strict validators)."""
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise CheckFailed(f"{name}'s input schema is not valid JSON Schema: {e.message}")
    known = set(cls.FORMAT_CHECKER.checkers)
    unknown = sorted(set(formats_in(schema)) - known)
    check(not unknown, f"{name}'s input schema uses formats no JSON Schema draft defines: {unknown}")
    return cls(schema)


async def run_check(session, word, expect_ingest):
    seen = {}
    init = await session.initialize()
    seen["server"] = dump(init).get("serverInfo", {}).get("name")

    tools = {t["name"]: t for t in (dump(x) for x in (await session.list_tools()).tools)}
    expected = READ_ONLY_TOOLS | ({"lcm_ingest"} if expect_ingest else set())
    check(set(tools) == expected, f"tools are {sorted(expected)}, got {sorted(tools)}")
    for name, t in tools.items():
        schema = t.get("inputSchema", {})
        check(schema.get("type") == "object", f"{name} has an object schema: {schema}")
        check(t.get("description"), f"{name} has a description")
    check("query" in tools["lcm_grep"]["inputSchema"].get("properties", {}), "lcm_grep's schema names query")
    seen["tools"] = sorted(tools)
    validators = {name: check_schema(name, t["inputSchema"]) for name, t in tools.items()}
    # The schemas, for the caller to compile with Ajv in strict mode.
    seen["schemas"] = {name: t["inputSchema"] for name, t in tools.items()}
    grep_args = {"query": word, "mode": "any_term", "limit": 5, "sessionKey": "agent:main:x"}
    check(validators["lcm_grep"].is_valid(grep_args), f"lcm_grep's schema accepts {grep_args}")
    check(not validators["lcm_grep"].is_valid({"query": word, "limit": -1}), "lcm_grep's schema refuses limit -1")

    sessions = await call(session, "sessions_list", {})
    rows = sessions["sessions"]
    check(rows, f"sessions_list lists the prefilled conversation: {sessions}")
    row = max(rows, key=lambda r: r["messages"])
    key = row["sessionKey"]
    seen["session"] = key
    seen["messages"] = row["messages"]
    paged = await call(session, "sessions_list", {"limit": 1})
    check(len(paged["sessions"]) == 1, f"sessions_list pages: {paged}")

    # grep: the three modes, scoped and unscoped, paged.
    hits = {}
    for mode, query in [("full_text", word), ("any_term", f"where is the {word} thing"), ("regex", word[:5] + ".*")]:
        r = await call(session, "lcm_grep", {"query": query, "mode": mode, "sessionKey": key})
        check(r["hits"], f"lcm_grep {mode} finds {query!r}: {r}")
        hits[mode] = len(r["hits"])
    seen["grepHits"] = hits
    everywhere = await call(session, "lcm_grep", {"query": word, "scope": "all"})
    check(everywhere["hits"], f"lcm_grep over every conversation: {everywhere}")
    first = await call(session, "lcm_grep", {"query": word, "sessionKey": key, "limit": 2})
    check(len(first["hits"]) == 2 and first.get("nextCursor"), f"a first page of 2 with a cursor: {first}")
    second = await call(
        session, "lcm_grep", {"query": word, "sessionKey": key, "limit": 2, "cursor": first["nextCursor"]}
    )
    check(second["hits"], f"the cursor reaches a second page: {second}")
    ids1 = {h["id"] for h in first["hits"]}
    check(not ids1 & {h["id"] for h in second["hits"]}, "the second page holds other hits")
    await mcp_error(
        session, "lcm_grep", {"query": "other", "sessionKey": key, "cursor": first["nextCursor"]},
        "a cursor of another query",
    )

    # describe and expand what grep found: a message and a summary.
    msg = next(h["id"] for h in first["hits"])
    d = await call(session, "lcm_describe", {"id": msg, "sessionKey": key})
    check(word in json.dumps(d), f"lcm_describe {msg} shows the text: {d}")
    e = await call(session, "lcm_expand", {"id": msg})
    check(word in json.dumps(e), f"lcm_expand {msg} shows the message: {e}")
    summaries = await call(session, "lcm_grep", {"query": word, "sessionKey": key, "target": "summaries"})
    check(summaries["hits"], f"the prefilled store has summaries mentioning {word}: {summaries}")
    sum_id = summaries["hits"][0]["id"]
    check(sum_id.startswith("sum_"), f"a summary id: {sum_id}")
    e = await call(session, "lcm_expand", {"id": sum_id, "maxTokens": 300})
    check(e["items"] and e["tokens"] <= 300, f"lcm_expand {sum_id} within 300 tokens: {e}")
    seen["expanded"] = {"id": sum_id, "items": len(e["items"]), "tokens": e["tokens"]}

    # context_assemble: what the engine would send.
    ctx = await call(session, "context_assemble", {"sessionKey": key, "tokenBudget": 3000, "prompt": word})
    check(ctx["messagesTotal"] > 0 and 0 < ctx["estimatedTokens"] <= 3000, f"context_assemble: {ctx}")
    check(ctx["systemPromptAddition"], "context_assemble carries the engine's system prompt addition")
    check(ctx["summaries"] > 0, f"the assembled context has summaries: {ctx['summaries']}")
    seen["assembled"] = {"messages": ctx["messagesTotal"], "tokens": ctx["estimatedTokens"]}

    # Resources: a conversation's summaries, one summary.
    resources = [dump(r) for r in (await session.list_resources()).resources]
    uris = [r["uri"] for r in resources]
    check(any(u.startswith("lcm://conversations/") for u in uris), f"resources list conversations: {uris}")
    templates = [dump(t)["uriTemplate"] for t in (await session.list_resource_templates()).resource_templates]
    check("lcm://summaries/{summaryId}" in templates, f"templates: {templates}")
    conv_uri = f"lcm://conversations/{row['conversationId']}/summaries"
    contents = dump(await session.read_resource(conv_uri))["contents"]
    dag = json.loads(contents[0]["text"])
    check(dag["roots"], f"{conv_uri} lists the top summaries: {dag}")
    root = dag["roots"][0]["id"]
    one = json.loads(dump(await session.read_resource(f"lcm://summaries/{root}"))["contents"][0]["text"])
    check(root in json.dumps(one), f"lcm://summaries/{root}: {one}")
    try:
        await session.read_resource("lcm://summaries/sum_999999999")
        raise CheckFailed("an unknown summary resource must be an MCP error")
    except MCPError:
        pass
    seen["resources"] = len(uris)

    # grep's former mode names (the CLI's until issue #39) are still accepted.
    for alias, mode in [("fts", "full_text"), ("any", "any_term")]:
        r = await call(session, "lcm_grep", {"query": word if mode == "full_text" else f"where is the {word} thing",
                                             "mode": alias, "sessionKey": key})
        check(len(r["hits"]) == hits[mode], f"mode {alias!r} is {mode!r}: {r}")

    # Arguments that do not fit the schema: JSON-RPC invalid_params, never a tool result.
    errors = []
    for name, args, what in [
        ("lcm_grep", {}, "a missing query"),
        ("lcm_grep", {"query": word, "limit": "many"}, "a wrong type"),
        ("lcm_grep", {"query": word, "bogus": 1}, "an unknown argument"),
        ("lcm_grep", {"query": word, "mode": "fuzzy"}, "an unknown mode"),
        ("lcm_expand", {"id": "msg_1", "maxTokens": -1}, "a negative cap"),
        ("context_assemble", {"tokenBudget": 100}, "a missing session"),
        ("lcm_describe", {"id": "msg_1", "extra": True}, "an unknown argument"),
    ]:
        errors.append(await invalid_params(session, name, args, what))

    # Other bad arguments: MCP errors, and the server keeps answering.
    for name, args, what in [
        ("lcm_grep", {}, "a missing query"),
        ("lcm_grep", {"query": word, "limit": "many"}, "a wrong type"),
        ("lcm_grep", {"query": word, "limit": 0}, "a limit out of range"),
        ("lcm_grep", {"query": word, "bogus": 1}, "an unknown argument"),
        ("lcm_grep", {"query": "(", "mode": "regex"}, "a bad regular expression"),
        ("lcm_grep", {"query": word, "scope": "conversation"}, "a scope without its session"),
        ("lcm_grep", {"query": word, "cursor": "nonsense"}, "a made-up cursor"),
        ("lcm_describe", {"id": "nonsense"}, "a malformed id"),
        ("lcm_describe", {"id": "msg_999999999"}, "an unknown id"),
        ("lcm_expand", {"id": sum_id, "maxTokens": -1}, "a negative cap"),
        ("context_assemble", {"tokenBudget": 100}, "a missing session"),
        ("sessions_list", {"limit": 100000}, "a page too large"),
    ]:
        errors.append(await mcp_error(session, name, args, what))
    if not expect_ingest:
        errors.append(await mcp_error(session, "lcm_ingest", {"sessionKey": key, "messages": []}, "read-only"))
    after = await call(session, "sessions_list", {})
    check(after["sessions"], "the server still answers after the bad calls")
    seen["badCallsRefused"] = len(errors)

    if expect_ingest:
        new_key = "agent:mcp:memory"
        r = await call(
            session,
            "lcm_ingest",
            {"sessionKey": new_key, "messages": [
                {"role": "user", "text": "remember the zircon-77 password hint"},
                {"role": "assistant", "text": "noted: zircon-77"},
            ]},
        )
        check(r["stored"] == 2, f"lcm_ingest stores both: {r}")
        again = await call(
            session, "lcm_ingest",
            {"sessionKey": new_key, "messages": [{"role": "user", "text": "remember the zircon-77 password hint", "timestamp": 1}]},
        )
        check(again["stored"] == 1, f"a message at another time is another message: {again}")
        found = await call(session, "lcm_grep", {"query": "zircon-77", "sessionKey": new_key})
        check(len(found["hits"]) >= 2, f"what was ingested is searchable at once: {found}")
        seen["ingested"] = r["stored"]
    return seen


def connect(args):
    if args.stdio:
        params = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:])
        return stdio_client(params)
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    return streamable_http_client(args.http, http_client=create_mcp_http_client(headers=headers))


async def session_run(args, body):
    async with connect(args) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            return await body(session)


async def bench(session, word, calls):
    await session.initialize()
    sessions = await call(session, "sessions_list", {})
    key = max(sessions["sessions"], key=lambda r: r["messages"])["sessionKey"]
    hit = (await call(session, "lcm_grep", {"query": word, "sessionKey": key}))["hits"][0]["id"]
    cases = {
        "lcm_grep": {"query": word, "sessionKey": key},
        "lcm_grep (any_term)": {"query": f"where is the {word} thing", "mode": "any_term", "sessionKey": key},
        "lcm_grep (regex)": {"query": word[:5] + ".*", "mode": "regex", "sessionKey": key},
        "lcm_describe": {"id": hit},
        "lcm_expand": {"id": hit},
        "sessions_list": {},
        "context_assemble": {"sessionKey": key, "tokenBudget": 8000, "prompt": word},
    }
    out = {}
    for label, a in cases.items():
        name = label.split(" ")[0]
        await call(session, name, a)
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            await call(session, name, a)
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        out[label] = {
            "p50": round(times[len(times) // 2], 2),
            "p95": round(times[min(len(times) - 1, int(len(times) * 0.95))], 2),
            "max": round(times[-1], 2),
        }
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["check", "refused", "bench"])
    p.add_argument("--word", default="obsidian")
    p.add_argument("--expect-ingest", action="store_true")
    p.add_argument("--http")
    p.add_argument("--token")
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--stdio", nargs=argparse.REMAINDER)
    args = p.parse_args()
    try:
        if args.what == "check":
            seen = anyio.run(session_run, args, lambda s: run_check(s, args.word, args.expect_ingest))
            print(json.dumps({"ok": True, **seen}))
        elif args.what == "bench":
            print(json.dumps(anyio.run(session_run, args, lambda s: bench(s, args.word, args.calls))))
        else:
            try:
                anyio.run(session_run, args, lambda s: s.initialize())
            except BaseException as e:  # noqa: BLE001 - any failure to connect is the point
                print(json.dumps({"ok": True, "refused": type(e).__name__ + ": " + str(e)[:300]}))
                return 0
            print(json.dumps({"ok": False, "error": "the server accepted a client without the token"}))
            return 1
    except CheckFailed as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
