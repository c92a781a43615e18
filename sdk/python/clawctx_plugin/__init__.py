"""clawctx Python plugin SDK.

A plugin is a module with a ``register(api)`` function (sync or async) that calls
``api.register_context_engine(engine_id, factory)``. The factory receives a dict
``{"config", "agentDir", "workspaceDir"}`` and returns an engine: any object (or dict) with an
``info`` dict and ``ingest``/``assemble``/``compact`` methods, plus any optional lifecycle
methods (``ingest_batch``/``ingestBatch``, ``bootstrap``, ``maintain``, ``after_turn``,
``prepare_subagent_spawn``, ``on_subagent_ended``, ``dispose``). Methods take one dict of
params (camelCase keys, exactly the OpenClaw wire JSON) and return a dict; they may be sync or
async. The runner (``python3 -m clawctx_plugin.runner``) serves the clawctx plugin protocol
(docs/plugin-protocol.md) on stdio.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, List, Optional

__all__ = [
    "MARKER_KEY",
    "PluginApi",
    "delegate_compaction_to_runtime",
    "build_memory_system_prompt_addition",
    "message_tokens_upper_bound",
    "messages_tokens_upper_bound",
]

MARKER_KEY = "__clawctx"

IMAGE_TOKENS = 1200
MESSAGE_OVERHEAD = 4
SUMMARY_PREFIX = 200


def delegate_compaction_to_runtime(params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Asks the host to run its own built-in compaction with the same params.

    Returns a marker result that the host recognizes; return it from ``compact``.
    """
    return {
        "ok": True,
        "compacted": False,
        "reason": "delegated-to-runtime",
        MARKER_KEY: {"delegateCompaction": True},
    }


def build_memory_system_prompt_addition(
    available_tools: Optional[Iterable[str]] = None,
    citations_mode: Optional[str] = None,
    agent_id: Optional[str] = None,
) -> Optional[str]:
    """Guidance about the memory tools available in this run, or None when there are none."""
    tools = sorted(t for t in (available_tools or []) if isinstance(t, str) and t.startswith("memory"))
    if not tools:
        return None
    who = f' for agent "{agent_id}"' if agent_id else ""
    lines = ["## Memory", f"Memory tools available{who}: {', '.join(tools)}."]
    lines.append("Search memory before answering questions about earlier work, decisions, people or preferences.")
    if citations_mode == "off":
        lines.append("Do not cite memory sources in replies.")
    elif citations_mode:
        lines.append("Cite the memory source (path and line) when you rely on it.")
    return "\n".join(lines)


def _utf8(text: Any) -> int:
    return len(text.encode("utf-8")) if isinstance(text, str) else 0


def _content_tokens(content: Any) -> int:
    if isinstance(content, str):
        return _utf8(content)
    if not isinstance(content, list):
        return 0
    total = 0
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            total += _utf8(block.get("text"))
        elif kind == "thinking":
            total += _utf8(block.get("thinking"))
        elif kind == "image":
            total += IMAGE_TOKENS
        elif kind == "toolCall":
            total += _utf8(block.get("name")) + _utf8(json.dumps(block.get("arguments", {})))
        else:
            total += _utf8(json.dumps(block))
    return total


def message_tokens_upper_bound(message: Dict[str, Any]) -> int:
    """An upper bound of the host's token estimate for one message (a BPE token is never
    shorter than one byte), so a context sized with it always fits the host's budget check."""
    role = message.get("role")
    if role == "toolResult":
        body = _content_tokens(message.get("content")) + _utf8(message.get("toolName"))
    elif role == "bashExecution":
        body = _utf8(message.get("command")) + _utf8(message.get("output"))
    elif role in ("compactionSummary", "branchSummary"):
        body = _utf8(message.get("summary")) + SUMMARY_PREFIX
    else:
        body = _content_tokens(message.get("content"))
    return body + MESSAGE_OVERHEAD


def messages_tokens_upper_bound(messages: Iterable[Dict[str, Any]]) -> int:
    """Sum of :func:`message_tokens_upper_bound`."""
    return sum(message_tokens_upper_bound(m) for m in messages)


class _Logger:
    def __init__(self, send_log: Callable[[str, str], None]):
        self._send = send_log

    def debug(self, *args: Any) -> None:
        self._send("debug", " ".join(str(a) for a in args))

    def info(self, *args: Any) -> None:
        self._send("info", " ".join(str(a) for a in args))

    def warn(self, *args: Any) -> None:
        self._send("warn", " ".join(str(a) for a in args))

    warning = warn

    def error(self, *args: Any) -> None:
        self._send("error", " ".join(str(a) for a in args))


class _Llm:
    def __init__(self, complete: Callable[[Dict[str, Any]], Any]):
        self._complete = complete

    async def complete(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """Runs an LLM completion through the host: ``{"prompt", "system"?, "messages"?,
        "maxTokens"?, "model"?}`` → ``{"text", "usage"?}``."""
        return await self._complete(request)


class _Runtime:
    def __init__(self, llm: _Llm):
        self.llm = llm


class PluginApi:
    """What ``register(api)`` receives."""

    def __init__(self, init: Dict[str, Any], send_log: Callable[[str, str], None], llm_complete: Callable[[Dict[str, Any]], Any]):
        plugin = init.get("plugin") or {}
        factory_context = init.get("factoryContext") or {}
        self.id: str = plugin.get("id", "")
        self.name: str = plugin.get("name") or self.id
        self.version: Optional[str] = plugin.get("version")
        self.root_dir: Optional[str] = plugin.get("root")
        self.config: Dict[str, Any] = factory_context.get("config") or {}
        self.plugin_config: Dict[str, Any] = init.get("pluginConfig") or {}
        self.logger = _Logger(send_log)
        self.llm = _Llm(llm_complete)
        self.runtime = _Runtime(self.llm)
        self.engines: Dict[str, Any] = {}
        self.tools: List[Any] = []
        self.hooks: List[Any] = []

    def register_context_engine(self, engine_id: str, factory: Any) -> None:
        """Registers an engine factory (a callable taking the factory context, or an engine)."""
        if not isinstance(engine_id, str) or not engine_id.strip():
            raise TypeError("register_context_engine(engine_id, factory): engine_id must be a non-empty string")
        if engine_id in self.engines:
            raise ValueError(f'context engine "{engine_id}" is already registered by this plugin')
        self.engines[engine_id] = factory

    registerContextEngine = register_context_engine

    def register_tool(self, tool: Any) -> None:
        """Registers a tool: a dict/object with ``name``, ``description``, ``parameters`` and
        ``execute(tool_call_id, arguments)``, or a factory returning one (or a list)."""
        self.tools.append(tool)

    registerTool = register_tool

    def on(self, hook: str, handler: Any) -> None:
        """Accepts a hook handler (stored; clawctx does not fire plugin hooks yet)."""
        self.hooks.append((hook, handler))
