// clawctx Node plugin runner.
//
// Loads an OpenClaw-style plugin (`export default function register(api) {...}`, a
// `definePluginEntry({...})` object, ESM or CommonJS; TypeScript through the plugin's own
// `jiti`) and serves the clawctx plugin protocol on stdio: JSON-RPC 2.0, one message per
// line; stdout carries only protocol messages (anything the plugin prints goes to stderr).
// The protocol is specified in docs/plugin-protocol.md.
import { AsyncLocalStorage } from 'node:async_hooks';
import { createRequire, register as registerLoaderHooks } from 'node:module';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';

const PROTOCOL_VERSION = 1;
const RUNNER_VERSION = '0.1.0';
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

// --- stdout is the protocol channel ---------------------------------------------------------
const protocolWrite = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, encoding, cb) => process.stderr.write(chunk, encoding, cb);

function send(msg) {
  protocolWrite(JSON.stringify(msg) + '\n');
}

// --- plugin -> host requests ----------------------------------------------------------------
const callStore = new AsyncLocalStorage();
let nextHostId = 1;
const hostPending = new Map();

function hostRequest(method, params) {
  const id = `plugin-${nextHostId++}`;
  return new Promise((resolve, reject) => {
    hostPending.set(id, { resolve, reject });
    send({ jsonrpc: '2.0', id, method, params });
  });
}

function hostLog(level, args) {
  const message = args.map((a) => (typeof a === 'string' ? a : safeJson(a))).join(' ');
  send({ jsonrpc: '2.0', method: 'host/log', params: { level, message } });
}

function safeJson(v) {
  try {
    return v instanceof Error ? v.stack || v.message : JSON.stringify(v);
  } catch {
    return String(v);
  }
}

function llmComplete(request) {
  const callId = callStore.getStore();
  return hostRequest('host/llm.complete', { request, callId: typeof callId === 'number' ? callId : null });
}

// --- SDK module resolution ------------------------------------------------------------------
const SDK_ESM = {
  'openclaw/plugin-sdk': 'plugin-sdk/index.mjs',
  'openclaw/plugin-sdk/core': 'plugin-sdk/core.mjs',
  'openclaw/plugin-sdk/plugin-entry': 'plugin-sdk/plugin-entry.mjs',
  'clawctx/plugin-sdk': 'plugin-sdk/index.mjs',
  'clawctx/plugin-sdk/core': 'plugin-sdk/core.mjs',
  'clawctx/plugin-sdk/plugin-entry': 'plugin-sdk/plugin-entry.mjs',
};
const SDK_CJS = {
  'openclaw/plugin-sdk': 'plugin-sdk/core.cjs',
  'openclaw/plugin-sdk/core': 'plugin-sdk/core.cjs',
  'openclaw/plugin-sdk/plugin-entry': 'plugin-sdk/plugin-entry.cjs',
  'clawctx/plugin-sdk': 'plugin-sdk/core.cjs',
  'clawctx/plugin-sdk/core': 'plugin-sdk/core.cjs',
  'clawctx/plugin-sdk/plugin-entry': 'plugin-sdk/plugin-entry.cjs',
};

function installSdkResolution() {
  const esmMap = Object.fromEntries(Object.entries(SDK_ESM).map(([k, v]) => [k, pathToFileURL(path.join(here, v)).href]));
  registerLoaderHooks('./loader.mjs', import.meta.url, { data: { map: esmMap } });
  const Module = require('node:module');
  const original = Module._resolveFilename;
  Module._resolveFilename = function resolveWithSdk(request, ...rest) {
    if (Object.prototype.hasOwnProperty.call(SDK_CJS, request)) return path.join(here, SDK_CJS[request]);
    return original.call(this, request, ...rest);
  };
}

async function loadEntry(entry, root) {
  const ext = path.extname(entry);
  if (ext === '.ts' || ext === '.mts' || ext === '.cts') {
    const req = createRequire(path.join(root, 'package.json'));
    let jitiPath;
    try {
      jitiPath = req.resolve('jiti');
    } catch {
      throw new Error(
        `TypeScript plugin entry ${entry} needs "jiti" in the plugin's node_modules (npm install jiti), or point the manifest at built JavaScript`,
      );
    }
    const jitiMod = await import(pathToFileURL(jitiPath).href);
    const createJiti = jitiMod.createJiti || (jitiMod.default && jitiMod.default.createJiti) || jitiMod.default;
    const alias = Object.fromEntries(Object.entries(SDK_CJS).map(([k, v]) => [k, path.join(here, v)]));
    const jiti = createJiti(pathToFileURL(entry).href, { interopDefault: true, alias });
    return typeof jiti.import === 'function' ? await jiti.import(entry) : jiti(entry);
  }
  return await import(pathToFileURL(entry).href);
}

function findRegister(mod) {
  const candidates = [mod && mod.default, mod && mod.register, mod && mod.default && mod.default.default, mod];
  for (const c of candidates) {
    if (typeof c === 'function') return c;
    if (c && typeof c === 'object' && typeof c.register === 'function') return c.register.bind(c);
  }
  return undefined;
}

// --- plugin state ---------------------------------------------------------------------------
const METHODS = [
  'ingest', 'assemble', 'compact', 'ingestBatch', 'bootstrap', 'maintain', 'afterTurn', 'commitTurn',
  'prepareSubagentSpawn', 'onSubagentEnded', 'dispose',
];
const state = {
  plugin: null,
  engines: new Map(),
  toolRegistrations: [],
  tools: new Map(),
  hooks: [],
  instances: new Map(),
  rollbacks: new Map(),
  controllers: new Map(),
  nextInstance: 1,
  nextRollback: 1,
  nextToolCall: 1,
};

function makeApi(init) {
  const plugin = init.plugin || {};
  const factoryContext = init.factoryContext || {};
  const logger = {
    debug: (...a) => hostLog('debug', a),
    info: (...a) => hostLog('info', a),
    warn: (...a) => hostLog('warn', a),
    error: (...a) => hostLog('error', a),
  };
  const llm = { complete: llmComplete };
  const api = {
    id: plugin.id,
    name: plugin.name || plugin.id,
    version: plugin.version,
    source: plugin.entry,
    rootDir: plugin.root,
    config: factoryContext.config == null ? {} : factoryContext.config,
    pluginConfig: init.pluginConfig == null ? {} : init.pluginConfig,
    logger,
    llm,
    runtime: { llm },
    registerContextEngine(id, factory) {
      if (typeof id !== 'string' || id.trim() === '') throw new TypeError('registerContextEngine(id, factory): id must be a non-empty string');
      if (state.engines.has(id)) throw new Error(`context engine "${id}" is already registered by this plugin`);
      state.engines.set(id, factory);
    },
    registerTool(tool, opts) {
      state.toolRegistrations.push({ tool, opts });
    },
    on(hook, handler) {
      state.hooks.push({ hook, handler });
    },
    resolvePath(p) {
      return path.resolve(plugin.root || process.cwd(), p);
    },
  };
  // Registration surfaces this host does not serve (channels, providers, ...) are accepted
  // and ignored, so a plugin that also registers them still loads.
  return new Proxy(api, {
    get(target, prop, receiver) {
      if (prop in target) return Reflect.get(target, prop, receiver);
      if (typeof prop === 'string' && prop.startsWith('register')) {
        return () => logger.debug(`api.${prop}() is not supported by clawctx; ignored`);
      }
      return undefined;
    },
  });
}

function resolveTools(init) {
  const ctx = {
    config: init.factoryContext && init.factoryContext.config,
    agentDir: init.factoryContext && init.factoryContext.agentDir,
    workspaceDir: init.factoryContext && init.factoryContext.workspaceDir,
    pluginConfig: init.pluginConfig,
  };
  for (const { tool, opts } of state.toolRegistrations) {
    let produced = tool;
    if (typeof tool === 'function') {
      try {
        produced = tool(ctx);
      } catch (err) {
        hostLog('warn', [`tool factory failed: ${err && err.message}`]);
        continue;
      }
    }
    const list = Array.isArray(produced) ? produced : produced ? [produced] : [];
    for (const t of list) {
      const name = (t && t.name) || (opts && opts.name);
      if (!name || typeof t.execute !== 'function') continue;
      state.tools.set(name, t);
    }
  }
  return [...state.tools.entries()].map(([name, t]) => ({
    name,
    description: typeof t.description === 'string' ? t.description : '',
    parameters: t.parameters || t.inputSchema || { type: 'object', properties: {} },
  }));
}

function cloneJson(v) {
  return v === undefined ? null : JSON.parse(JSON.stringify(v));
}

function contractError(message) {
  const err = new Error(message);
  err.clawctxKind = 'contract';
  return err;
}

function engineDecl(id, factory) {
  if (typeof factory === 'function') return { id };
  if (factory && typeof factory === 'object') {
    return { id, info: cloneJson(factory.info), methods: METHODS.filter((m) => typeof factory[m] === 'function') };
  }
  return { id };
}

// --- protocol handlers ----------------------------------------------------------------------
const handlers = {
  async initialize(params) {
    state.plugin = params.plugin || {};
    if (!state.plugin.entry) throw new Error('initialize: plugin.entry is missing');
    installSdkResolution();
    const mod = await loadEntry(state.plugin.entry, state.plugin.root || path.dirname(state.plugin.entry));
    const register = findRegister(mod);
    if (!register) {
      throw new Error(
        `plugin entry ${state.plugin.entry} exports no register(api) function (expected a default export, a "register" export, or definePluginEntry({...}))`,
      );
    }
    await register(makeApi(params));
    const tools = resolveTools(params);
    return {
      protocolVersion: PROTOCOL_VERSION,
      runner: { name: 'clawctx-node-runner', version: RUNNER_VERSION, node: process.version },
      engines: [...state.engines.entries()].map(([id, f]) => engineDecl(id, f)),
      tools,
    };
  },

  async 'engine/create'(params) {
    const engineId = params.engineId;
    if (!state.engines.has(engineId)) {
      const known = [...state.engines.keys()].sort().join(', ') || '(none)';
      throw new Error(`Context engine "${engineId}" is not registered by plugin "${state.plugin && state.plugin.id}". Registered: ${known}`);
    }
    const factory = state.engines.get(engineId);
    const fc = params.factoryContext || {};
    const ctx = {
      config: fc.config == null ? undefined : fc.config,
      agentDir: fc.agentDir == null ? undefined : fc.agentDir,
      workspaceDir: fc.workspaceDir == null ? undefined : fc.workspaceDir,
    };
    const engine = typeof factory === 'function' ? await factory(ctx) : factory;
    if (engine === null || (typeof engine !== 'object' && typeof engine !== 'function')) {
      let shown;
      try {
        shown = JSON.stringify(engine);
      } catch (err) {
        throw contractError(err && err.message ? err.message : String(err));
      }
      throw contractError(`Context engine "${engineId}" factory returned ${shown} instead of a ContextEngine object.`);
    }
    const instanceId = String(state.nextInstance++);
    state.instances.set(instanceId, engine);
    const info = engine.info && typeof engine.info === 'object' ? cloneJson(engine.info) : null;
    return { instanceId, info, methods: METHODS.filter((m) => typeof engine[m] === 'function') };
  },

  async 'engine/rollback'(params) {
    const fn = state.rollbacks.get(String(params.rollbackId));
    state.rollbacks.delete(String(params.rollbackId));
    if (typeof fn !== 'function') throw new Error(`unknown rollback id ${params.rollbackId}`);
    await fn();
    return null;
  },

  async 'engine/dispose'(params) {
    const engine = state.instances.get(String(params.instanceId));
    state.instances.delete(String(params.instanceId));
    if (engine && typeof engine.dispose === 'function') await engine.dispose();
    return null;
  },

  async 'tool/execute'(params, id) {
    const tool = state.tools.get(params.name);
    if (!tool) throw new Error(`unknown tool "${params.name}"`);
    const ctx = params.context || {};
    const controller = new AbortController();
    state.controllers.set(id, controller);
    try {
      const toolCallId = ctx.toolCallId || `clawctx-tool-${state.nextToolCall++}`;
      const result = await tool.execute(toolCallId, params.arguments || {}, controller.signal, () => {});
      return result === undefined ? null : result;
    } finally {
      state.controllers.delete(id);
    }
  },

  async shutdown() {
    setImmediate(async () => {
      for (const engine of state.instances.values()) {
        try {
          if (typeof engine.dispose === 'function') await engine.dispose();
        } catch {
          // best effort
        }
      }
      process.exit(0);
    });
    return null;
  },
};

async function callEngine(method, params, id) {
  const instanceId = String(params.instanceId);
  const engine = state.instances.get(instanceId);
  if (!engine) throw new Error(`unknown engine instance ${instanceId}`);
  if (typeof engine[method] !== 'function') throw new Error(`context engine does not implement ${method}()`);
  const p = params.params && typeof params.params === 'object' ? params.params : {};
  if (method === 'assemble' && Array.isArray(p.availableTools)) p.availableTools = new Set(p.availableTools);
  if (p.runtimeContext && typeof p.runtimeContext === 'object') {
    p.runtimeContext.llm = { complete: llmComplete };
  }
  const controller = new AbortController();
  state.controllers.set(id, controller);
  if (params.abortable || method === 'compact') p.abortSignal = controller.signal;
  try {
    const result = await engine[method](p);
    if (method === 'prepareSubagentSpawn') {
      if (result && typeof result.rollback === 'function') {
        const rollbackId = String(state.nextRollback++);
        state.rollbacks.set(rollbackId, result.rollback.bind(result));
        return { hasRollback: true, rollbackId };
      }
      return { hasRollback: false, rollbackId: null };
    }
    return result === undefined ? null : result;
  } finally {
    state.controllers.delete(id);
  }
}

function toRpcError(err) {
  const message = err && typeof err.message === 'string' ? err.message : String(err);
  return {
    code: -32000,
    message,
    data: { name: err && err.name, kind: err && err.clawctxKind, stack: err && err.stack },
  };
}

async function handleRequest(msg) {
  const { id, method } = msg;
  const params = msg.params == null ? {} : msg.params;
  let result;
  try {
    if (Object.prototype.hasOwnProperty.call(handlers, method)) {
      result = await handlers[method](params, id);
    } else if (method.startsWith('engine/') && METHODS.includes(method.slice(7))) {
      result = await callEngine(method.slice(7), params, id);
    } else {
      send({ jsonrpc: '2.0', id, error: { code: -32601, message: `method not found: ${method}` } });
      return;
    }
  } catch (err) {
    send({ jsonrpc: '2.0', id, error: toRpcError(err) });
    return;
  }
  let line;
  try {
    line = JSON.stringify({ jsonrpc: '2.0', id, result: result === undefined ? null : result });
  } catch (err) {
    send({ jsonrpc: '2.0', id, error: toRpcError(err) });
    return;
  }
  protocolWrite(line + '\n');
}

function onMessage(msg) {
  if (msg && typeof msg.method === 'string') {
    if (msg.id !== undefined && msg.id !== null) {
      callStore.run(msg.id, () => {
        handleRequest(msg);
      });
    } else if (msg.method === '$/cancelRequest') {
      const controller = state.controllers.get(msg.params && msg.params.id);
      if (controller) controller.abort(new Error('Context engine operation aborted.'));
    }
    return;
  }
  if (msg && msg.id !== undefined && hostPending.has(msg.id)) {
    const { resolve, reject } = hostPending.get(msg.id);
    hostPending.delete(msg.id);
    if (msg.error) reject(Object.assign(new Error(msg.error.message || 'host error'), { code: msg.error.code }));
    else resolve(msg.result);
  }
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  if (!line.trim()) return;
  let msg;
  try {
    msg = JSON.parse(line);
  } catch (err) {
    process.stderr.write(`clawctx runner: invalid JSON from host: ${err.message}\n`);
    return;
  }
  onMessage(msg);
});
rl.on('close', () => process.exit(0));
