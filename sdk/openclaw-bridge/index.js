// clawctx-bridge: an OpenClaw context-engine plugin whose every lifecycle call is forwarded to a
// running clawctx gateway (`POST /v1/engine/<method>`, `GET /v1/engine/info`). No runtime
// dependencies: Node's global fetch.
//
// A gateway that is down or answers an error makes the call throw an Error naming the URL and
// the status or cause (never the token), so the host quarantines the engine and falls back to
// legacy, as the context-engine contract expects.

import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// The plugin id, which is also the engine id: OpenClaw treats `plugins.slots.contextEngine` as a
// plugin id (its installer writes the plugin id there, `doctor` flags any other value, its
// gateway loads at startup only the plugin the slot names), so the two must be equal.
export const PLUGIN_ID = 'clawctx';

export const DEFAULTS = Object.freeze({
  gatewayUrl: 'http://127.0.0.1:18789',
  engineId: PLUGIN_ID,
  timeoutMs: 120000,
});

// Lifecycle methods forwarded when the gateway's engine implements them. `ingest`, `assemble`
// and `compact` are always present (the contract requires them). `prepareSubagentSpawn` too,
// its rollback run by the gateway (`POST /v1/engine/rollback`).
const REQUIRED = ['ingest', 'assemble', 'compact'];
const OPTIONAL = ['ingestBatch', 'bootstrap', 'maintain', 'afterTurn', 'commitTurn', 'onSubagentEnded'];

/** The plugin config with defaults applied and the token resolved (from `token` or `tokenEnv`). */
export function resolveConfig(raw, env = process.env) {
  const c = raw && typeof raw === 'object' ? raw : {};
  const url = typeof c.gatewayUrl === 'string' && c.gatewayUrl.trim() !== '' ? c.gatewayUrl.trim() : DEFAULTS.gatewayUrl;
  let token = typeof c.token === 'string' && c.token !== '' ? c.token : undefined;
  if (token === undefined && typeof c.tokenEnv === 'string' && c.tokenEnv !== '') {
    const v = env[c.tokenEnv];
    if (typeof v === 'string' && v !== '') token = v;
  }
  const timeoutMs = Number.isFinite(c.timeoutMs) && c.timeoutMs > 0 ? Math.floor(c.timeoutMs) : DEFAULTS.timeoutMs;
  // `engineId` is ignored: the engine id is always the plugin id (see PLUGIN_ID).
  return { gatewayUrl: url.replace(/\/+$/, ''), token, engineId: DEFAULTS.engineId, timeoutMs };
}

// Params as JSON: functions (runtimeContext.llm.complete, rewriteTranscriptEntries, ...) and the
// abort signal cannot cross; a Set (assemble's availableTools) goes as an array.
function toJson(params) {
  if (params === undefined || params === null) return '{}';
  return JSON.stringify(params, function replacer(key, value) {
    if (typeof value === 'function' || typeof value === 'symbol') return undefined;
    if (key === 'abortSignal' && this === params) return undefined;
    if (typeof AbortSignal !== 'undefined' && value instanceof AbortSignal) return undefined;
    if (value instanceof Set) return [...value];
    if (value instanceof Map) return Object.fromEntries(value);
    if (typeof value === 'bigint') return Number(value);
    return value;
  });
}

function redact(text, token) {
  if (!token) return text;
  return String(text).split(token).join('[redacted]');
}

/** A small client for the gateway's engine API. */
export function gatewayClient(config, fetchImpl = globalThis.fetch) {
  if (typeof fetchImpl !== 'function') throw new Error('clawctx-bridge needs a global fetch (Node 18 or later)');
  const { gatewayUrl, token, timeoutMs } = config;

  async function request(method, path, body, signal) {
    const url = `${gatewayUrl}${path}`;
    if (signal && signal.aborted) throw new Error(`clawctx gateway ${method} ${url}: aborted`);
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    const onAbort = () => controller.abort();
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    const headers = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (token) headers.authorization = `Bearer ${token}`;
    let res;
    let text;
    try {
      res = await fetchImpl(url, { method, headers, body, signal: controller.signal });
      text = await res.text();
    } catch (err) {
      let why;
      if (timedOut) why = `timed out after ${timeoutMs} ms`;
      else if (signal && signal.aborted) why = 'aborted';
      else {
        const cause = err && err.cause;
        why = (cause && (cause.code || cause.message)) || (err && err.message) || String(err);
        why = `unreachable (${why})`;
      }
      throw new Error(redact(`clawctx gateway ${method} ${url}: ${why}`, token));
    } finally {
      clearTimeout(timer);
      if (signal) signal.removeEventListener('abort', onAbort);
    }
    if (!res.ok) {
      let detail = text ? text.slice(0, 500) : '';
      let code;
      try {
        const j = JSON.parse(text);
        if (j && j.error && typeof j.error.message === 'string') detail = j.error.message;
        if (j && j.error && typeof j.error.code === 'string') code = j.error.code;
      } catch {
        // not JSON: the start of the body
      }
      const error = new Error(redact(`clawctx gateway ${method} ${url}: HTTP ${res.status}${detail ? `: ${detail}` : ''}`, token));
      error.status = res.status;
      if (code) error.code = code;
      throw error;
    }
    if (text === '') return null;
    try {
      return JSON.parse(text);
    } catch {
      throw new Error(redact(`clawctx gateway ${method} ${url}: HTTP ${res.status}: the reply is not JSON`, token));
    }
  }

  return {
    info: (signal) => request('GET', '/v1/engine/info', undefined, signal),
    call: (name, params) =>
      request('POST', `/v1/engine/${name}`, toJson(params), params && typeof params === 'object' ? params.abortSignal : undefined),
  };
}

// --- History the gateway never saw ---------------------------------------------------------
// OpenClaw 2026.8+ keeps transcripts in SQLite: the `sessionFile` an engine gets is the session
// key, not a path. Turns answered before the bridge was selected, or on `legacy` while the
// gateway was down, are only in that transcript. Before `bootstrap` and `assemble` the bridge
// reads the transcript's visible messages it has not sent yet (OpenClaw's
// `openclaw/plugin-sdk/session-transcript-runtime`, `readSessionTranscriptVisibleMessageDelta`,
// cursor based) and sends them with `ingestBatch`; the engine's ingest is idempotent, so a
// message the gateway already has is not stored twice.
//
// Three rules keep that from sending anything twice or too early:
// - The turn in progress is never history. OpenClaw fences the turn's own entries off the reads
//   it makes inside `bootstrap` and its first `assemble`, but not inside the `assemble` of its
//   context hook (after the prompt is in the transcript): there the read stops before the
//   newest user entry carrying the turn's `prompt`. The turn's messages reach the gateway
//   through `commitTurn`.
// - After a `commitTurn` the gateway accepted, the cursor moves past the turn's entries
//   (admission through terminal) without sending them again.
// - The cursor outlives the engine object (OpenClaw creates one per turn) and the process: it
//   is kept per gateway and session in OpenClaw's state dir (`fileCursorStore`). A lost or
//   stale cursor only sends history again, which ingest deduplicates.

export const TRANSCRIPT_RUNTIME = 'openclaw/plugin-sdk/session-transcript-runtime';
const DELTA_PAGE_MESSAGES = 500;
const DELTA_MAX_PAGES = 200;

async function importTranscriptRuntime() {
  try {
    return await import(TRANSCRIPT_RUNTIME);
  } catch {
    return null; // a host without it (an older OpenClaw): nothing to read
  }
}

/**
 * OpenClaw's state dir: what its plugin runtime resolves (`api.runtime.state.resolveStateDir`),
 * else `OPENCLAW_STATE_DIR`; `undefined` in a host that is not OpenClaw (clawctx's own runner),
 * where the bridge writes nothing of OpenClaw's.
 */
export function openclawStateDir(env = process.env, api = undefined) {
  const resolve = api && api.runtime && api.runtime.state && api.runtime.state.resolveStateDir;
  if (typeof resolve === 'function') {
    try {
      const dir = resolve(env);
      if (typeof dir === 'string' && dir !== '') return dir;
    } catch {
      // fall through to the variable
    }
  }
  const override = typeof env.OPENCLAW_STATE_DIR === 'string' ? env.OPENCLAW_STATE_DIR.trim() : '';
  if (override !== '') return override.startsWith('~') ? path.join(os.homedir(), override.slice(1)) : override;
  return undefined;
}

/**
 * Transcript cursors kept in a JSON file (`{"<gateway>\u0000<agent>\u0000<key>\u0000<id>":
 * "<cursor>"}`), written whole through a temporary file and a rename, so a reader never sees
 * half a file. Two processes writing at once may lose one update: that session's next sync
 * sends a page again, which ingest deduplicates. An unreadable file counts as empty.
 */
export function fileCursorStore(file, logger) {
  let warned = false;
  const readAll = async () => {
    try {
      const v = JSON.parse(await fs.readFile(file, 'utf8'));
      return v && typeof v === 'object' && !Array.isArray(v) ? v : {};
    } catch {
      return {};
    }
  };
  return {
    file,
    async get(slot) {
      const v = (await readAll())[slot];
      return typeof v === 'string' ? v : undefined;
    },
    async set(slot, cursor) {
      try {
        const all = await readAll();
        if (cursor === undefined) delete all[slot];
        else all[slot] = cursor;
        await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
        const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
        await fs.writeFile(tmp, JSON.stringify(all), { mode: 0o600 });
        await fs.rename(tmp, file);
      } catch (err) {
        if (logger && !warned) logger.warn(`clawctx: cannot keep the transcript cursor in ${file}: ${err && err.message}`);
        warned = true;
      }
    },
  };
}

/** A cursor store in this process only (tests, hosts without OpenClaw's state dir). */
export function memoryCursorStore() {
  const map = new Map();
  return {
    async get(slot) {
      return map.get(slot);
    },
    async set(slot, cursor) {
      if (cursor === undefined) map.delete(slot);
      else map.set(slot, cursor);
    },
  };
}

// Outside OpenClaw: the cursors live as long as the plugin process.
const PROCESS_CURSORS = memoryCursorStore();

function textOf(message) {
  const c = message && message.content;
  if (typeof c === 'string') return c;
  if (Array.isArray(c)) return c.map((p) => (p && typeof p.text === 'string' ? p.text : '')).join('');
  return '';
}

/**
 * A transcript message worth storing: a `custom` (or other host-only) message without text
 * (OpenClaw writes one per tool search) is left out, so recall never quotes an empty row.
 */
export function worthStoring(message) {
  if (!message || typeof message !== 'object' || typeof message.role !== 'string') return false;
  if (['user', 'assistant', 'toolResult', 'tool', 'system'].includes(message.role)) return true;
  return textOf(message).trim() !== '';
}

/**
 * The transcript sync of one gateway. `sync(params, stop)` sends the session's transcript
 * messages not yet sent, stopping before the entry `stop` names: `{entryId}` (that entry) or
 * `{prompt}` (the newest user entry whose text holds the turn's prompt). `committed(params)`
 * moves the cursor past a committed turn (`params.admission.entryId` through
 * `params.terminal.entryId`) when it is next in the transcript. `loadRuntime` resolves the
 * transcript runtime module (or null); `cursors` keeps the cursors (see fileCursorStore);
 * `client.call('ingestBatch', …)` sends. A transcript that cannot be read is logged and skipped
 * (the turn goes on); a gateway that fails throws.
 */
export function transcriptSync(
  client,
  { loadRuntime = importTranscriptRuntime, logger, methods, cursors = memoryCursorStore(), gatewayUrl = '' } = {},
) {
  let runtime;
  const reader = async () => {
    if (runtime === undefined) runtime = await loadRuntime();
    const read = runtime && runtime.readSessionTranscriptVisibleMessageDelta;
    return typeof read === 'function' ? read : null;
  };
  const targetOf = (params) => {
    const target = { sessionId: params.sessionId };
    if (typeof params.sessionKey === 'string') target.sessionKey = params.sessionKey;
    if (typeof params.agentId === 'string') target.agentId = params.agentId;
    return target;
  };
  const slotOf = (params) =>
    [gatewayUrl, params.agentId || '', params.sessionKey || '', params.sessionId].join('\u0000');
  // The cursor after the first `count` entries read from `cursor`.
  const cursorAfter = async (read, target, cursor, count) => {
    const r = await read({ ...target, ...(cursor !== undefined ? { cursor } : {}), maxMessages: count });
    return r && r.kind === 'page' && Array.isArray(r.entries) && r.entries.length === count ? r.cursor : undefined;
  };
  const stopIndex = (entries, stop) => {
    if (!stop) return -1;
    if (typeof stop.entryId === 'string') return entries.findIndex((e) => e && e.entryId === stop.entryId);
    const prompt = typeof stop.prompt === 'string' ? stop.prompt.trim() : '';
    if (prompt === '') return -1;
    for (let i = entries.length - 1; i >= 0; i--) {
      const m = entries[i] && entries[i].message;
      if (m && m.role === 'user' && textOf(m).includes(prompt)) return i;
    }
    return -1;
  };

  async function sync(params, stop) {
    if (!params || typeof params.sessionId !== 'string') return 0;
    if (methods && !methods.includes('ingestBatch')) return 0;
    const read = await reader();
    if (!read) return 0;
    const target = targetOf(params);
    const slot = slotOf(params);
    let cursor = await cursors.get(slot);
    let sent = 0;
    let resets = 0;
    for (let page = 0; page < DELTA_MAX_PAGES; page++) {
      let r;
      try {
        r = await read({ ...target, ...(cursor !== undefined ? { cursor } : {}), maxMessages: DELTA_PAGE_MESSAGES });
      } catch (err) {
        // A cursor past the current turn's fence (OpenClaw rewrote the turn, say after an
        // overflow compaction): read again from the start once (ingest is idempotent).
        if (cursor !== undefined && resets++ < 2) {
          cursor = undefined;
          await cursors.set(slot, undefined);
          continue;
        }
        if (logger) logger.warn(`clawctx: cannot read the transcript of ${params.sessionKey || params.sessionId}: ${err && err.message}`);
        return sent;
      }
      if (!r || typeof r !== 'object') return sent;
      if (r.kind === 'reset') {
        // A replaced transcript or a stale cursor: read again from its start (ingest is idempotent).
        cursor = r.cursor;
        await cursors.set(slot, cursor);
        if (++resets > 2) return sent;
        continue;
      }
      if (r.kind !== 'page') return sent; // missing, unavailable: nothing to send now
      let entries = Array.isArray(r.entries) ? r.entries : [];
      let next = r.cursor;
      const at = stopIndex(entries, stop);
      if (at >= 0) {
        entries = entries.slice(0, at);
        next = at === 0 ? cursor : await cursorAfter(read, target, cursor, at);
        if (next === undefined && at > 0) return sent; // the transcript moved: next time
      }
      const messages = entries.map((e) => e && e.message).filter(worthStoring);
      if (messages.length > 0) {
        await client.call('ingestBatch', {
          sessionId: params.sessionId,
          ...(typeof params.sessionKey === 'string' ? { sessionKey: params.sessionKey } : {}),
          messages,
        });
        sent += messages.length;
      }
      if (next !== cursor) {
        cursor = next;
        await cursors.set(slot, cursor);
      }
      if (at >= 0 || !r.hasMore) return sent;
    }
    return sent;
  }

  async function committed(params) {
    const first = params && params.admission && params.admission.entryId;
    const last = params && params.terminal && params.terminal.entryId;
    if (typeof params.sessionId !== 'string' || typeof first !== 'string' || typeof last !== 'string') return false;
    const read = await reader();
    if (!read) return false;
    const target = targetOf(params);
    const slot = slotOf(params);
    const cursor = await cursors.get(slot);
    try {
      const r = await read({ ...target, ...(cursor !== undefined ? { cursor } : {}), maxMessages: DELTA_PAGE_MESSAGES });
      if (!r || r.kind !== 'page' || !Array.isArray(r.entries)) return false;
      // Only when the turn is next: anything before it has not been sent yet.
      if (!r.entries[0] || r.entries[0].entryId !== first) return false;
      const end = r.entries.findIndex((e) => e && e.entryId === last);
      if (end < 0) return false;
      const next = end === r.entries.length - 1 ? r.cursor : await cursorAfter(read, target, cursor, end + 1);
      if (next === undefined) return false;
      await cursors.set(slot, next);
      return true;
    } catch {
      return false; // fenced or moved: the next sync reads the turn again (idempotent)
    }
  }

  sync.committed = committed;
  return sync;
}

/**
 * The engine object: `info` from the gateway (its id the one registered here), each lifecycle
 * method the gateway's engine implements forwarded, `dispose` a no-op (the gateway owns the
 * engine). Before `bootstrap` and `assemble`, the transcript's unsent messages go first
 * (`options.sync`, see transcriptSync); `commitTurn` sends the history before the turn first
 * and moves the cursor past the turn once the gateway has it. `options.cursors` keeps the
 * cursors (default: `<OpenClaw state dir>/plugins/clawctx/transcript-cursors.json`; in a host
 * that is not OpenClaw, this process's memory).
 */
export async function createEngine(rawConfig, options = {}) {
  const config = resolveConfig(rawConfig, options.env || process.env);
  const client = options.client || gatewayClient(config, options.fetch || globalThis.fetch);
  const reply = await client.info();
  const remote = reply && typeof reply.info === 'object' && reply.info !== null ? reply.info : {};
  const methods = reply && Array.isArray(reply.methods) ? reply.methods : [];
  const stateDir = openclawStateDir(options.env || process.env, options.api);
  const cursors =
    options.cursors ||
    (stateDir !== undefined
      ? fileCursorStore(path.join(stateDir, 'plugins', PLUGIN_ID, 'transcript-cursors.json'), options.logger)
      : PROCESS_CURSORS);
  const sync =
    options.sync ||
    transcriptSync(client, { logger: options.logger, methods, loadRuntime: options.loadRuntime, cursors, gatewayUrl: config.gatewayUrl });
  const engine = {
    info: {
      ...remote,
      id: config.engineId,
      name: `${remote.name || remote.id || 'clawctx'} (clawctx gateway)`,
      ownsCompaction: Boolean(remote.ownsCompaction),
    },
    async dispose() {},
  };
  for (const m of [...REQUIRED, ...OPTIONAL.filter((o) => methods.includes(o))]) {
    engine[m] = (params) => client.call(m, params);
  }
  if (engine.bootstrap) {
    engine.bootstrap = async (params) => {
      await sync(params);
      return client.call('bootstrap', params);
    };
  }
  // The turn's own entries are not history: the read stops before its prompt (see above).
  engine.assemble = async (params) => {
    await sync(params, params && typeof params.prompt === 'string' ? { prompt: params.prompt } : undefined);
    return client.call('assemble', params);
  };
  if (engine.commitTurn) {
    engine.commitTurn = async (params) => {
      const admission = params && params.admission && params.admission.entryId;
      if (typeof admission === 'string') await sync(params, { entryId: admission });
      const out = { ...params };
      if (Array.isArray(params && params.messages)) out.messages = params.messages.filter(worthStoring);
      const result = await client.call('commitTurn', out);
      if (result && (result.status === 'committed' || result.status === 'duplicate') && typeof sync.committed === 'function') {
        await sync.committed(params);
      }
      return result;
    };
  }
  if (engine.bootstrap) {
    // The gateway reads only the transcripts it is allowed to (the session's own in its state
    // dir, or under its gateway.engineApi.transcriptRoots): a host's transcript elsewhere is
    // refused with 403 path_not_allowed. Nothing was imported, and the engine is fine: say so
    // as bootstrap's result rather than fail (a host quarantines an engine whose call throws).
    const bootstrap = engine.bootstrap;
    engine.bootstrap = async (params) => {
      try {
        return await bootstrap(params);
      } catch (err) {
        if (err && err.code === 'path_not_allowed') {
          if (options.logger) options.logger.warn(`clawctx: ${err.message}`);
          return { bootstrapped: false, reason: err.message };
        }
        throw err;
      }
    };
  }
  if (methods.includes('prepareSubagentSpawn')) {
    // The rollback stays in the gateway: the preparation's rollback asks it to run it.
    engine.prepareSubagentSpawn = async (params) => {
      const reply = await client.call('prepareSubagentSpawn', params);
      if (!reply || reply.hasRollback !== true || typeof reply.rollbackId !== 'string') return undefined;
      const rollbackId = reply.rollbackId;
      return {
        rollback: async () => {
          await client.call('rollback', { rollbackId });
        },
      };
    };
  }
  return engine;
}

// --- Recall tools ----------------------------------------------------------------------------
// The gateway's engine (lossless) has recall tools, but OpenClaw offers the model only tools a
// plugin registers: the bridge registers them (declared in the manifest's `contracts.tools`, as
// OpenClaw requires) and each call goes to the gateway's recall route for the calling session.

export const RECALL_TOOLS = Object.freeze([
  {
    name: 'lcm_grep',
    label: 'Search history',
    description:
      "Search this conversation's full stored history (including everything summarized away). Full-text by default " +
      '(1-3 distinctive terms, all must match); mode "any_term" takes a whole question or description and ranks ' +
      'what shares the most and rarest of its words; mode "regex" for patterns. Returns message/summary ids with ' +
      'snippets; use lcm_describe / lcm_expand on an id for details.',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string', description: 'Terms (full_text), free text (any_term) or a regular expression (regex).' },
        mode: { type: 'string', enum: ['full_text', 'any_term', 'regex'], default: 'full_text' },
        target: { type: 'string', enum: ['both', 'messages', 'summaries'], default: 'both' },
        sort: { type: 'string', enum: ['relevance', 'recency'], default: 'relevance' },
        scope: {
          type: 'string',
          enum: ['session', 'agent'],
          default: 'session',
          description: "session = this conversation (including before /new); agent = all of this agent's sessions.",
        },
        limit: { type: 'integer', minimum: 1, maximum: 200, default: 20 },
        offset: { type: 'integer', minimum: 0, default: 0 },
      },
      required: ['query'],
    },
  },
  {
    name: 'lcm_describe',
    label: 'Describe a summary or message',
    description:
      'Show a summary (sum_<n>) or message (msg_<n>) by id: time range, depth, parents, children and sources.',
    parameters: {
      type: 'object',
      properties: { id: { type: 'string', description: 'sum_<n> or msg_<n> (from lcm_grep or a <summary> block).' } },
      required: ['id'],
    },
  },
  {
    name: 'lcm_expand',
    label: 'Expand a summary',
    description:
      'Open a summary (sum_<n>) back into its children or source messages, token-capped; check exact commands, ' +
      'paths, identifiers and numbers here before quoting them from a summary.',
    parameters: {
      type: 'object',
      properties: {
        id: { type: 'string', description: 'sum_<n> (or msg_<n>).' },
        maxTokens: { type: 'integer', minimum: 1, description: 'Cap on the returned text, in tokens.' },
      },
      required: ['id'],
    },
  },
]);

/** The recall tools for one tool context (OpenClaw's `toolContext`: its `sessionKey`). */
export function recallTools(client, ctx) {
  const sessionKey = (ctx && (ctx.sessionKey || ctx.sessionId)) || undefined;
  return RECALL_TOOLS.map((spec) => ({
    ...spec,
    async execute(_toolCallId, args, signal) {
      if (!sessionKey) {
        return { content: [{ type: 'text', text: `${spec.name}: no session to search (the host gave no session key)` }], details: { error: 'no session key' } };
      }
      const params = { ...(args && typeof args === 'object' ? args : {}), sessionKey };
      if (signal) params.abortSignal = signal;
      try {
        const result = await client.call(spec.name, params);
        return { content: [{ type: 'text', text: JSON.stringify(result) }], details: result };
      } catch (err) {
        // A tool error the model can read; the turn goes on.
        const message = err && err.message ? err.message : String(err);
        return { content: [{ type: 'text', text: `${spec.name} failed: ${message}` }], details: { error: message } };
      }
    },
  }));
}

export default function register(api) {
  const config = resolveConfig(api && api.pluginConfig);
  const logger = api && api.logger;
  api.registerContextEngine(config.engineId, () => createEngine(api.pluginConfig, { logger, api }));
  if (typeof api.registerTool === 'function') {
    const client = gatewayClient(config);
    api.registerTool((ctx) => recallTools(client, ctx), { names: RECALL_TOOLS.map((t) => t.name) });
  }
}
