// clawctx-bridge: an OpenClaw context-engine plugin whose every lifecycle call is forwarded to a
// running clawctx gateway (`POST /v1/engine/<method>`, `GET /v1/engine/info`). No runtime
// dependencies: Node's global fetch.
//
// A gateway that is down or answers an error makes the call throw an Error naming the URL and
// the status or cause (never the token), so the host quarantines the engine and falls back to
// legacy, as the context-engine contract expects.

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
      try {
        const j = JSON.parse(text);
        if (j && j.error && typeof j.error.message === 'string') detail = j.error.message;
      } catch {
        // not JSON: the start of the body
      }
      throw new Error(redact(`clawctx gateway ${method} ${url}: HTTP ${res.status}${detail ? `: ${detail}` : ''}`, token));
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

/**
 * The engine object: `info` from the gateway (its id the one registered here), each lifecycle
 * method the gateway's engine implements forwarded, `dispose` a no-op (the gateway owns the engine).
 */
export async function createEngine(rawConfig, options = {}) {
  const config = resolveConfig(rawConfig, options.env || process.env);
  const client = gatewayClient(config, options.fetch || globalThis.fetch);
  const reply = await client.info();
  const remote = reply && typeof reply.info === 'object' && reply.info !== null ? reply.info : {};
  const methods = reply && Array.isArray(reply.methods) ? reply.methods : [];
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

export default function register(api) {
  const config = resolveConfig(api && api.pluginConfig);
  api.registerContextEngine(config.engineId, () => createEngine(api.pluginConfig));
}
