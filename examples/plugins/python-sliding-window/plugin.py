"""A sliding-window context engine for clawctx, written in Python.

assemble() keeps the newest messages (at most ``maxMessages``) that fit the token budget. The
window is a contiguous suffix of the history that never starts with a tool result, so a tool
result always keeps the call before it. Compaction is the host's own (delegated).
"""

from clawctx_plugin import (
    build_memory_system_prompt_addition,
    delegate_compaction_to_runtime,
    message_tokens_upper_bound,
)

ENGINE_ID = "python-sliding-window"


class SlidingWindow:
    def __init__(self, max_messages, logger):
        self.max_messages = max_messages
        self.logger = logger
        self.info = {"id": ENGINE_ID, "name": "Python Sliding Window", "version": "0.1.0"}

    async def ingest(self, params):
        # The host keeps the transcript; this engine only windows it.
        return {"ingested": False}

    async def assemble(self, params):
        messages = params.get("messages") or []
        budget = params.get("tokenBudget")
        start = len(messages)
        used = 0
        while start > 0 and len(messages) - start < self.max_messages:
            cost = message_tokens_upper_bound(messages[start - 1])
            if budget is not None and used + cost > budget:
                break
            used += cost
            start -= 1
        while start < len(messages) and messages[start].get("role") == "toolResult":
            used -= message_tokens_upper_bound(messages[start])
            start += 1
        window = messages[start:]
        if start > 0:
            self.logger.debug(f"window keeps {len(window)} of {len(messages)} messages")
        result = {"messages": window, "estimatedTokens": used}
        addition = build_memory_system_prompt_addition(params.get("availableTools"), params.get("citationsMode"))
        if addition:
            result["systemPromptAddition"] = addition
        return result

    def compact(self, params):
        return delegate_compaction_to_runtime(params)

    def after_turn(self, params):
        return None


def register(api):
    max_messages = int(api.plugin_config.get("maxMessages", 40))
    api.register_context_engine(ENGINE_ID, lambda ctx: SlidingWindow(max_messages, api.logger))
