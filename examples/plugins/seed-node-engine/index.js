// The example plugin from the context-engine documentation (the `register(api)` block is
// copied unchanged), with the helper functions it uses filled in.
import { buildMemorySystemPromptAddition } from "openclaw/plugin-sdk/core";

const IMAGE_TOKENS = 1200;
const MESSAGE_OVERHEAD = 4;
const SUMMARY_PREFIX = 200;

function utf8Bytes(text) {
  return typeof text === "string" ? Buffer.byteLength(text, "utf8") : 0;
}

function contentTokens(content) {
  if (typeof content === "string") return utf8Bytes(content);
  if (!Array.isArray(content)) return 0;
  let total = 0;
  for (const block of content) {
    if (!block || typeof block !== "object") continue;
    if (block.type === "text") total += utf8Bytes(block.text);
    else if (block.type === "thinking") total += utf8Bytes(block.thinking);
    else if (block.type === "image") total += IMAGE_TOKENS;
    else if (block.type === "toolCall") total += utf8Bytes(block.name) + utf8Bytes(JSON.stringify(block.arguments ?? {}));
    else total += utf8Bytes(JSON.stringify(block));
  }
  return total;
}

// An upper bound of the host's o200k estimate: a BPE token is never shorter than one byte.
function messageTokens(message) {
  let body;
  switch (message?.role) {
    case "toolResult":
      body = contentTokens(message.content) + utf8Bytes(message.toolName);
      break;
    case "bashExecution":
      body = utf8Bytes(message.command) + utf8Bytes(message.output);
      break;
    case "compactionSummary":
    case "branchSummary":
      body = utf8Bytes(message.summary) + SUMMARY_PREFIX;
      break;
    default:
      body = contentTokens(message?.content);
  }
  return body + MESSAGE_OVERHEAD;
}

function countTokens(messages) {
  return (messages ?? []).reduce((sum, m) => sum + messageTokens(m), 0);
}

// Keeps the newest messages that fit the budget. The kept window is a contiguous suffix that
// never starts with a tool result, so every tool result keeps the call before it.
function buildContext(messages, tokenBudget) {
  const all = messages ?? [];
  if (tokenBudget === undefined || tokenBudget === null) return all;
  let start = all.length;
  let used = 0;
  while (start > 0) {
    const cost = messageTokens(all[start - 1]);
    if (used + cost > tokenBudget) break;
    used += cost;
    start -= 1;
  }
  while (start < all.length && all[start]?.role === "toolResult") start += 1;
  return all.slice(start);
}

// `agent:<agentId>:...` session keys name their agent; otherwise the configured default agent.
function resolveSessionAgentId({ config, sessionKey }) {
  const match = typeof sessionKey === "string" ? /^agent:([^:]+):/.exec(sessionKey.trim()) : null;
  if (match) return match[1].toLowerCase();
  const agents = config?.agents?.list;
  if (Array.isArray(agents) && agents.length > 0) {
    const chosen = agents.find((a) => a?.default) ?? agents[0];
    if (typeof chosen?.id === "string" && chosen.id.trim()) return chosen.id.trim().toLowerCase();
  }
  return "main";
}

export default function register(api) {
  api.registerContextEngine("my-engine", (ctx) => ({
    info: {
      id: "my-engine",
      name: "My Context Engine",
      ownsCompaction: true,
    },

    async ingest({ sessionId, message, isHeartbeat }) {
      // Збережіть повідомлення у своєму сховищі даних
      return { ingested: true };
    },

    async assemble({
      sessionId,
      sessionKey,
      messages,
      tokenBudget,
      availableTools,
      citationsMode,
    }) {
      // Поверніть повідомлення, які вкладаються в бюджет
      return {
        messages: buildContext(messages, tokenBudget),
        estimatedTokens: countTokens(messages),
        systemPromptAddition: buildMemorySystemPromptAddition({
          availableTools: availableTools ?? new Set(),
          citationsMode,
          agentId: resolveSessionAgentId({ config: ctx.config, sessionKey }),
          agentSessionKey: sessionKey,
        }),
      };
    },

    async compact({ sessionId, force }) {
      // Узагальніть давніший контекст
      return { ok: true, compacted: true };
    },
  }));
}
