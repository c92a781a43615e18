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

/**
 * OpenClaw's plugin config schema object from a JSON Schema: `{ safeParse, uiHints?,
 * jsonSchema }`. `safeParse` accepts every value: the host validated
 * `plugins.entries.<id>.config` against the manifest's `configSchema` before the plugin
 * loaded (OpenClaw also applies the schema's defaults here; clawctx does not).
 */
function buildJsonPluginConfigSchema(schema, options) {
  const opts = options || {};
  const safeParse = typeof opts.safeParse === 'function' ? opts.safeParse : (value) => ({ success: true, data: value === undefined ? {} : value });
  const out = { safeParse };
  if (opts.uiHints) out.uiHints = opts.uiHints;
  out.jsonSchema = schema;
  return out;
}

/**
 * The same from a Zod schema: its own `safeParse`, and its JSON Schema when the Zod version
 * can export one.
 */
function buildPluginConfigSchema(schema, options) {
  const opts = options || {};
  const safeParse =
    typeof opts.safeParse === 'function'
      ? opts.safeParse
      : (value) => (schema && typeof schema.safeParse === 'function' ? schema.safeParse(value) : { success: true, data: value });
  let jsonSchema = { type: 'object' };
  if (schema && typeof schema.toJSONSchema === 'function') {
    try {
      jsonSchema = schema.toJSONSchema({ target: 'draft-07' });
    } catch {
      // a schema Zod cannot export: the loose object schema
    }
  }
  const out = { safeParse };
  if (opts.uiHints) out.uiHints = opts.uiHints;
  out.jsonSchema = jsonSchema;
  return out;
}

/** OpenClaw's core module re-exports definePluginEntry (required lazily: plugin-entry.cjs requires this module). */
function definePluginEntry(options) {
  return require('./plugin-entry.cjs').definePluginEntry(options);
}

module.exports = {
  MARKER_KEY,
  buildMemorySystemPromptAddition,
  prepareMemorySystemPromptAddition,
  delegateCompactionToRuntime,
  emptyPluginConfigSchema,
  buildJsonPluginConfigSchema,
  buildPluginConfigSchema,
  definePluginEntry,
};
