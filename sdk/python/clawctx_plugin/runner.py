"""clawctx Python plugin runner: ``python3 -m clawctx_plugin.runner``.

Serves the clawctx plugin protocol (JSON-RPC 2.0, one message per line on stdio; see
docs/plugin-protocol.md). stdout carries only protocol messages: ``print`` in plugin code goes
to stderr.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import inspect
import json
import os
import sys
import threading
import traceback
from typing import Any, Dict, Optional

from clawctx_plugin import PluginApi

PROTOCOL_VERSION = 1
METHODS = [
    "ingest", "assemble", "compact", "ingestBatch", "bootstrap", "maintain", "afterTurn", "commitTurn",
    "prepareSubagentSpawn", "onSubagentEnded", "dispose",
]
SNAKE = {
    "ingestBatch": "ingest_batch",
    "afterTurn": "after_turn",
    "commitTurn": "commit_turn",
    "prepareSubagentSpawn": "prepare_subagent_spawn",
    "onSubagentEnded": "on_subagent_ended",
}

_protocol_out = sys.stdout.buffer
sys.stdout = sys.stderr
_current_call: contextvars.ContextVar[Optional[int]] = contextvars.ContextVar("clawctx_call", default=None)


class ContractError(Exception):
    """A factory result that is not an engine."""


class Runner:
    def __init__(self) -> None:
        self.loop = asyncio.get_event_loop()
        self.api: Optional[PluginApi] = None
        self.plugin: Dict[str, Any] = {}
        self.instances: Dict[str, Any] = {}
        self.rollbacks: Dict[str, Any] = {}
        self.tools: Dict[str, Any] = {}
        self.host_pending: Dict[str, asyncio.Future] = {}
        self.next_host_id = 1
        self.next_instance = 1
        self.next_rollback = 1

    # --- output ---------------------------------------------------------------------------
    def send(self, msg: Dict[str, Any]) -> None:
        _protocol_out.write(json.dumps(msg, separators=(",", ":")).encode("utf-8") + b"\n")
        _protocol_out.flush()

    def log(self, level: str, message: str) -> None:
        self.send({"jsonrpc": "2.0", "method": "host/log", "params": {"level": level, "message": message}})

    async def host_request(self, method: str, params: Dict[str, Any]) -> Any:
        rid = f"plugin-{self.next_host_id}"
        self.next_host_id += 1
        fut = self.loop.create_future()
        self.host_pending[rid] = fut
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return await fut

    async def llm_complete(self, request: Dict[str, Any]) -> Any:
        return await self.host_request("host/llm.complete", {"request": request, "callId": _current_call.get()})

    # --- plugin loading -------------------------------------------------------------------
    def load_module(self, entry: str, root: str) -> Any:
        if root and root not in sys.path:
            sys.path.insert(0, root)
        if os.path.isdir(entry):
            init = os.path.join(entry, "__init__.py")
            spec = importlib.util.spec_from_file_location(os.path.basename(entry), init, submodule_search_locations=[entry])
        else:
            name = os.path.splitext(os.path.basename(entry))[0]
            spec = importlib.util.spec_from_file_location(f"clawctx_plugin_entry_{name}", entry)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"cannot load Python plugin entry {entry}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module

    # --- engines --------------------------------------------------------------------------
    @staticmethod
    def member(engine: Any, name: str) -> Any:
        names = [name, SNAKE.get(name, name)]
        for n in names:
            if isinstance(engine, dict):
                fn = engine.get(n)
            else:
                fn = getattr(engine, n, None)
            if callable(fn):
                return fn
        return None

    @staticmethod
    def info_of(engine: Any) -> Any:
        info = engine.get("info") if isinstance(engine, dict) else getattr(engine, "info", None)
        if callable(info):
            info = info()
        return info if isinstance(info, dict) else None

    async def call_maybe(self, fn: Any, *args: Any) -> Any:
        result = fn(*args)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def initialize(self, params: Dict[str, Any]) -> Any:
        self.plugin = params.get("plugin") or {}
        entry = self.plugin.get("entry")
        if not entry:
            raise RuntimeError("initialize: plugin.entry is missing")
        module = self.load_module(entry, self.plugin.get("root") or os.path.dirname(entry))
        register = getattr(module, "register", None)
        if not callable(register):
            raise RuntimeError(f"plugin entry {entry} has no register(api) function")
        self.api = PluginApi(params, self.log, self.llm_complete)
        await self.call_maybe(register, self.api)
        tools = []
        fc = params.get("factoryContext") or {}
        for t in self.api.tools:
            produced = t(fc) if callable(t) and not hasattr(t, "execute") and not isinstance(t, dict) else t
            for tool in produced if isinstance(produced, list) else [produced]:
                name = tool.get("name") if isinstance(tool, dict) else getattr(tool, "name", None)
                if not name:
                    continue
                self.tools[name] = tool
                get = (lambda k, d=None: tool.get(k, d)) if isinstance(tool, dict) else (lambda k, d=None: getattr(tool, k, d))
                tools.append({"name": name, "description": get("description", "") or "", "parameters": get("parameters", {"type": "object"})})
        engines = []
        for engine_id, factory in self.api.engines.items():
            decl: Dict[str, Any] = {"id": engine_id}
            if not callable(factory):
                decl["info"] = self.info_of(factory)
                decl["methods"] = [m for m in METHODS if self.member(factory, m)]
            engines.append(decl)
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "runner": {"name": "clawctx-python-runner", "version": "0.1.0", "python": sys.version.split()[0]},
            "engines": engines,
            "tools": tools,
        }

    async def create(self, params: Dict[str, Any]) -> Any:
        assert self.api is not None
        engine_id = params.get("engineId")
        if engine_id not in self.api.engines:
            known = ", ".join(sorted(self.api.engines)) or "(none)"
            raise RuntimeError(f'Context engine "{engine_id}" is not registered by plugin "{self.plugin.get("id")}". Registered: {known}')
        factory = self.api.engines[engine_id]
        fc = params.get("factoryContext") or {}
        ctx = {"config": fc.get("config"), "agentDir": fc.get("agentDir"), "workspaceDir": fc.get("workspaceDir")}
        engine = await self.call_maybe(factory, ctx) if callable(factory) else factory
        if engine is None or isinstance(engine, (bool, int, float, str, list)):
            raise ContractError(f'Context engine "{engine_id}" factory returned {json.dumps(engine)} instead of a ContextEngine object.')
        instance_id = str(self.next_instance)
        self.next_instance += 1
        self.instances[instance_id] = engine
        return {"instanceId": instance_id, "info": self.info_of(engine), "methods": [m for m in METHODS if self.member(engine, m)]}

    async def call_engine(self, method: str, params: Dict[str, Any]) -> Any:
        engine = self.instances.get(str(params.get("instanceId")))
        if engine is None:
            raise RuntimeError(f"unknown engine instance {params.get('instanceId')}")
        fn = self.member(engine, method)
        if fn is None:
            raise RuntimeError(f"context engine does not implement {method}()")
        call_params = params.get("params") or {}
        runtime_context = call_params.get("runtimeContext") if isinstance(call_params, dict) else None
        if isinstance(runtime_context, dict):
            call_id = _current_call.get()

            async def rewrite_transcript_entries(request: Dict[str, Any]) -> Any:
                return await self.host_request("host/rewriteTranscriptEntries", {"request": request, "callId": call_id})

            runtime_context["rewriteTranscriptEntries"] = rewrite_transcript_entries
        result = await self.call_maybe(fn, call_params)
        if method == "prepareSubagentSpawn":
            rollback = None
            if isinstance(result, dict):
                rollback = result.get("rollback")
            elif result is not None:
                rollback = getattr(result, "rollback", None)
            if callable(rollback):
                rid = str(self.next_rollback)
                self.next_rollback += 1
                self.rollbacks[rid] = rollback
                return {"hasRollback": True, "rollbackId": rid}
            return {"hasRollback": False, "rollbackId": None}
        return result

    async def dispatch(self, method: str, params: Dict[str, Any]) -> Any:
        if method == "initialize":
            return await self.initialize(params)
        if method == "engine/create":
            return await self.create(params)
        if method == "engine/rollback":
            fn = self.rollbacks.pop(str(params.get("rollbackId")), None)
            if fn is None:
                raise RuntimeError(f"unknown rollback id {params.get('rollbackId')}")
            await self.call_maybe(fn)
            return None
        if method == "engine/dispose":
            engine = self.instances.pop(str(params.get("instanceId")), None)
            fn = self.member(engine, "dispose") if engine is not None else None
            if fn:
                await self.call_maybe(fn)
            return None
        if method == "tool/execute":
            tool = self.tools.get(params.get("name"))
            if tool is None:
                raise RuntimeError(f'unknown tool "{params.get("name")}"')
            execute = tool.get("execute") if isinstance(tool, dict) else getattr(tool, "execute")
            ctx = params.get("context") or {}
            return await self.call_maybe(execute, ctx.get("toolCallId") or "clawctx-tool", params.get("arguments") or {})
        if method == "shutdown":
            self.loop.call_later(0.01, self.stop)
            return None
        if method.startswith("engine/") and method[7:] in METHODS:
            return await self.call_engine(method[7:], params)
        raise LookupError(method)

    def stop(self) -> None:
        _protocol_out.flush()
        os._exit(0)

    async def handle_request(self, msg: Dict[str, Any]) -> None:
        rid = msg.get("id")
        _current_call.set(rid if isinstance(rid, int) else None)
        method = msg.get("method", "")
        try:
            result = await self.dispatch(method, msg.get("params") or {})
            line = {"jsonrpc": "2.0", "id": rid, "result": result}
            self.send(line)
        except LookupError:
            self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}})
        except Exception as err:  # noqa: BLE001 - every engine error goes back to the host
            kind = "contract" if isinstance(err, ContractError) else None
            self.send({
                "jsonrpc": "2.0",
                "id": rid,
                "error": {"code": -32000, "message": str(err) or type(err).__name__,
                          "data": {"name": type(err).__name__, "kind": kind, "stack": traceback.format_exc()}},
            })

    def on_message(self, msg: Dict[str, Any]) -> None:
        if isinstance(msg.get("method"), str):
            if msg.get("id") is not None:
                # Each task runs in its own copy of the context: the call id set inside it is
                # what llm.complete reports as callId.
                self.loop.create_task(self.handle_request(msg))
            return
        fut = self.host_pending.pop(msg.get("id"), None)
        if fut is not None and not fut.done():
            err = msg.get("error")
            if err:
                fut.set_exception(RuntimeError(err.get("message", "host error")))
            else:
                fut.set_result(msg.get("result"))

    async def run(self) -> None:
        queue: asyncio.Queue = asyncio.Queue()

        def reader() -> None:
            for raw in sys.stdin.buffer:
                self.loop.call_soon_threadsafe(queue.put_nowait, raw)
            self.loop.call_soon_threadsafe(queue.put_nowait, None)

        threading.Thread(target=reader, daemon=True).start()
        while True:
            raw = await queue.get()
            if raw is None:
                break
            if not raw.strip():
                continue
            try:
                msg = json.loads(raw)
            except ValueError as err:
                sys.stderr.write(f"clawctx runner: invalid JSON from host: {err}\n")
                continue
            if isinstance(msg, dict):
                self.on_message(msg)


def main() -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    runner = Runner()
    loop.run_until_complete(runner.run())
    _protocol_out.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
