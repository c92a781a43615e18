// clawctx implementation of "openclaw/plugin-sdk/core" (the parts context engines use).
//
// delegateCompactionToRuntime() cannot run the host's compaction inside the plugin process:
// it returns a marker result ({ok: true, compacted: false, reason: "delegated-to-runtime",
// __clawctx: {delegateCompaction: true}}) that the host's adapter recognizes, and the host
// then runs its own built-in compaction with the same params (docs/plugin-protocol.md).
'use strict';

const MARKER_KEY = '__clawctx';

function toToolSet(availableTools) {
  if (!availableTools) return new Set();
  if (availableTools instanceof Set) return availableTools;
  if (Array.isArray(availableTools)) return new Set(availableTools);
  if (typeof availableTools === 'object') return new Set(Object.keys(availableTools));
  return new Set();
}

/**
 * Guidance for the model about the memory tools available in this run, or undefined when
 * there are none. Synchronous, like OpenClaw's.
 */
function buildMemorySystemPromptAddition(params) {
  const { availableTools, citationsMode, agentId, sandboxed } = params || {};
  const tools = [...toToolSet(availableTools)].filter((name) => typeof name === 'string' && /^memory([_-]|$)/.test(name));
  if (tools.length === 0) return undefined;
  const lines = ['## Memory', `Memory tools available${agentId ? ` for agent "${agentId}"` : ''}: ${tools.sort().join(', ')}.`];
  lines.push('Search memory before answering questions about earlier work, decisions, people or preferences.');
  if (citationsMode === 'off') {
    lines.push('Do not cite memory sources in replies.');
  } else if (citationsMode) {
    lines.push('Cite the memory source (path and line) when you rely on it.');
  }
  if (sandboxed) lines.push('Memory files are read-only in this sandbox.');
  const text = lines.join('\n').trim();
  return text.length > 0 ? text : undefined;
}

/** Async variant of buildMemorySystemPromptAddition. */
async function prepareMemorySystemPromptAddition(params) {
  return buildMemorySystemPromptAddition(params);
}

/** Asks the host to run its own built-in compaction for these params (see the header). */
async function delegateCompactionToRuntime(_params) {
  return {
    ok: true,
    compacted: false,
    reason: 'delegated-to-runtime',
    [MARKER_KEY]: { delegateCompaction: true },
  };
}

/** An empty, strict plugin config schema. */
function emptyPluginConfigSchema() {
  return { type: 'object', additionalProperties: false, properties: {} };
}

module.exports = {
  MARKER_KEY,
  buildMemorySystemPromptAddition,
  prepareMemorySystemPromptAddition,
  delegateCompactionToRuntime,
  emptyPluginConfigSchema,
};
