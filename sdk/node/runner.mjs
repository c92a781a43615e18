// clawctx Node plugin runner.
//
// Loads an OpenClaw-style plugin (`export default function register(api) {...}`, a
// `definePluginEntry({...})` object, ESM or CommonJS; TypeScript through jiti, the plugin's
// own or the copy vendored next to this file) and serves the clawctx plugin protocol on stdio:
// JSON-RPC 2.0, one message per line; stdout carries only protocol messages (anything the
// plugin prints goes to stderr). The protocol is specified in docs/plugin-protocol.md.
//
// Start-up and per-call cost are both on the agent's critical path, so:
// - Node's compile cache is switched on where it exists (Node >= 22.1);
// - the SDK module names resolve through in-thread hooks where Node has them
//   (`module.registerHooks`, Node >= 22.15). On older Node the only ESM hook is
//   `module.register`, which starts a loader worker thread (tens of milliseconds), so it is
//   registered only when a cheap scan of the plugin's own sources finds an ES import that may
//   need it (see needsEsmHooks). CommonJS `require` of the SDK never needs it;
// - jiti (1.7 MB) is loaded only for TypeScript entries;
// - stdin is framed by hand on Buffers (no readline, no per-line regex), and each reply is
//   written with one write;
// - `assemble` messages come by reference when the host offers it (docs/plugin-protocol.md,
//   "Message references"): a message is parsed once per process, not once per call, and one
//   handed back untouched is answered as `{"$ref":id}` instead of being serialized again.
import { AsyncLocalStorage } from 'node:async_hooks';
import * as nodeModule from 'node:module';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const { createRequire } = nodeModule;
if (typeof nodeModule.enableCompileCache === 'function') {
  try {
    nodeModule.enableCompileCache();
  } catch {
    // a cache is an optimization: never a reason not to start
  }
}

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
// `api.llm.complete` tells the host which call it belongs to (so the host answers with that
// call's services) through an AsyncLocalStorage. On Node 20 an active AsyncLocalStorage hooks
// every promise of the process, so it is only switched on once the plugin touches `api.llm` or
// `api.runtime`; `runtimeContext.llm` (per call) carries its call id in a closure instead.
// The call during which that first touch happens is not inside the storage: while its
// synchronous part runs, `syncCallId` names it. A callback naming no call is refused by the
// host (it never guesses whose services to use).
const callStore = new AsyncLocalStorage();
let callStoreInUse = false;
let syncCallId;
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

// The first touch of `api.llm`/`api.runtime` switches the storage on. When it happens inside a
// call (a plugin reading `api.llm` lazily), that call is not inside the storage: entering it
// now binds the rest of the call (everything after its next await) to its id, so a second
// `complete` after an await still names the call.
function useCallStore() {
  if (callStoreInUse) return;
  callStoreInUse = true;
  if (syncCallId !== undefined) callStore.enterWith(syncCallId);
}

function llmComplete(request) {
  const id = callStore.getStore();
  return llmCompleteFor(id !== undefined ? id : syncCallId, request);
}

function llmCompleteFor(callId, request) {
  return hostRequest('host/llm.complete', { request, callId: typeof callId === 'number' ? callId : null });
}

// --- the session transcript (openclaw/plugin-sdk/session-transcript-runtime) ------------------
// OpenClaw's transcript functions take a session identity, not a call: the host serves a read
// with the services of an engine call in progress for that session (the runtime answers only
// for its own session). Engine calls in progress, by request id, with their session:
const inflight = new Map();

function transcriptCallFor(request) {
  const current = callStoreInUse ? callStore.getStore() : syncCallId;
  const named = request.sessionId !== undefined || request.sessionKey !== undefined;
  const matches = (s) =>
    s &&
    (request.sessionId === undefined || s.sessionId === request.sessionId) &&
    (request.sessionKey === undefined || s.sessionKey === request.sessionKey);
  if (current !== undefined && (!named || matches(inflight.get(current)))) return current;
  if (named) {
    let found;
    for (const [id, s] of inflight) if (matches(s)) found = id;
    if (found !== undefined) return found;
  }
  return current;
}

globalThis[Symbol.for('clawctx.runner')] = Object.freeze({
  transcriptRead(method, request) {
    const callId = transcriptCallFor(request);
    if (callId === undefined) {
      const who = request.sessionKey || request.sessionId || 'no session named';
      return Promise.reject(
        new Error(`the session transcript (${who}) can be read only during an engine call for that session (clawctx serves it with that call's session)`),
      );
    }
    return hostRequest(method, { request, callId: typeof callId === 'number' ? callId : null });
  },
});

// --- SDK module resolution ------------------------------------------------------------------
const SDK_ESM = {
  'openclaw/plugin-sdk': 'plugin-sdk/index.mjs',
  'openclaw/plugin-sdk/core': 'plugin-sdk/core.mjs',
  'openclaw/plugin-sdk/plugin-entry': 'plugin-sdk/plugin-entry.mjs',
  'clawctx/plugin-sdk': 'plugin-sdk/index.mjs',
  'clawctx/plugin-sdk/core': 'plugin-sdk/core.mjs',
  'clawctx/plugin-sdk/plugin-entry': 'plugin-sdk/plugin-entry.mjs',
  'openclaw/plugin-sdk/session-transcript-runtime': 'plugin-sdk/session-transcript-runtime.mjs',
  'clawctx/plugin-sdk/session-transcript-runtime': 'plugin-sdk/session-transcript-runtime.mjs',
};
const SDK_CJS = {
  'openclaw/plugin-sdk': 'plugin-sdk/core.cjs',
  'openclaw/plugin-sdk/core': 'plugin-sdk/core.cjs',
  'openclaw/plugin-sdk/plugin-entry': 'plugin-sdk/plugin-entry.cjs',
  'clawctx/plugin-sdk': 'plugin-sdk/core.cjs',
  'clawctx/plugin-sdk/core': 'plugin-sdk/core.cjs',
  'clawctx/plugin-sdk/plugin-entry': 'plugin-sdk/plugin-entry.cjs',
  'openclaw/plugin-sdk/session-transcript-runtime': 'plugin-sdk/session-transcript-runtime.cjs',
  'clawctx/plugin-sdk/session-transcript-runtime': 'plugin-sdk/session-transcript-runtime.cjs',
};

let cjsPatched = false;
function installCjsResolution() {
  if (cjsPatched) return;
  cjsPatched = true;
  const Module = require('node:module');
  const original = Module._resolveFilename;
  Module._resolveFilename = function resolveWithSdk(request, ...rest) {
    if (Object.prototype.hasOwnProperty.call(SDK_CJS, request)) return path.join(here, SDK_CJS[request]);
    return original.call(this, request, ...rest);
  };
}

// Node's message for an SDK module it cannot find names only the package (`Cannot find package
// 'openclaw'`); this one names the module, as the CommonJS message does.
function missingSdkModule(specifier, parentURL, cause) {
  const from = parentURL && parentURL.startsWith('file:') ? fileURLToPath(parentURL) : parentURL;
  const err = new Error(`Cannot find module '${specifier}' imported from ${from} (clawctx does not provide this OpenClaw SDK module)`);
  err.code = 'ERR_MODULE_NOT_FOUND';
  if (cause && cause.stack) err.stack = `${err.message}\n${cause.stack}`;
  return err;
}

function esmSdkMap() {
  return Object.fromEntries(Object.entries(SDK_ESM).map(([k, v]) => [k, pathToFileURL(path.join(here, v)).href]));
}

// Installs the SDK resolution for ES modules. `mode` is 'in-thread' (cheap, Node >= 22.15),
// 'worker' (module.register: a loader thread), or 'none' (the scan found no ES import that
// could need it).
function installEsmResolution(mode) {
  if (mode === 'in-thread') {
    const map = esmSdkMap();
    nodeModule.registerHooks({
      resolve(specifier, context, nextResolve) {
        if (Object.prototype.hasOwnProperty.call(map, specifier)) return { url: map[specifier], shortCircuit: true };
        if (!isSdkSpecifier(specifier)) return nextResolve(specifier, context);
        try {
          // An SDK module clawctx does not provide: the plugin's own `openclaw`, if it has one.
          return nextResolve(specifier, context);
        } catch (err) {
          throw missingSdkModule(specifier, context.parentURL, err);
        }
      },
    });
  } else if (mode === 'worker') {
    nodeModule.register('./loader.mjs', import.meta.url, { data: { map: esmSdkMap() } });
  }
}

// --- deciding whether ES modules need the SDK hooks (Node < 22.15) ---------------------------
// Conservative: any doubt answers true, which only costs the loader thread's start-up.
const SCAN_MAX_FILES = 200;
const SCAN_MAX_BYTES = 8 * 1024 * 1024;
// ES import forms with a literal specifier: `from '…'`, `import '…'`, `import('…')`.
const ES_IMPORT = /(?:\bfrom|\bimport)\s*\(?\s*(['"])([^'"\n]+)\1/g;
// `import(expr)` with a computed specifier: cannot be followed.
const COMPUTED_IMPORT = /\bimport\s*\(\s*(?!['"\s])/;

function isSdkSpecifier(spec) {
  return /^(?:openclaw|clawctx)\/plugin-sdk(?:\/|$)/.test(spec);
}

function needsEsmHooks(entry) {
  const seen = new Set();
  const queue = [entry];
  let bytes = 0;
  while (queue.length > 0) {
    const file = queue.pop();
    if (seen.has(file)) continue;
    seen.add(file);
    if (seen.size > SCAN_MAX_FILES) return true;
    let text;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch {
      return true;
    }
    bytes += text.length;
    if (bytes > SCAN_MAX_BYTES) return true;
    if (COMPUTED_IMPORT.test(text)) return true;
    for (const m of text.matchAll(ES_IMPORT)) {
      const spec = m[2];
      if (isSdkSpecifier(spec)) return true;
      if (spec.startsWith('./') || spec.startsWith('../')) {
        const ext = path.extname(spec);
        if (ext === '.json' || ext === '.node' || ext === '.wasm') continue;
        queue.push(path.resolve(path.dirname(file), spec.split(/[?#]/)[0]));
      } else if (spec.startsWith('node:') || nodeModule.builtinModules.includes(spec)) {
        continue;
      } else if (spec.startsWith('file:') || spec.startsWith('data:') || spec.startsWith('/')) {
        return true;
      } else {
        // A package: its own imports are not scanned.
        return true;
      }
    }
  }
  return false;
}

function isTypeScript(entry) {
  const ext = path.extname(entry);
  return ext === '.ts' || ext === '.mts' || ext === '.cts';
}

function installSdkResolution(entry) {
  installCjsResolution();
  if (typeof nodeModule.registerHooks === 'function') installEsmResolution('in-thread');
  else if (!isTypeScript(entry) && needsEsmHooks(entry)) installEsmResolution('worker');
}

// --- loading the entry, as OpenClaw's loader does ---------------------------------------------
// OpenClaw loads a plugin entry with jiti (`createJiti(..., {interopDefault: true, alias,
// tryNative})`): for .js/.mjs/.cjs native loading first and jiti's own (Babel-transformed,
// CommonJS-style) loading when that fails; TypeScript through jiti only; the
// `openclaw/plugin-sdk/*` aliases in both. So a built ESM entry doing
// `import { Name } from 'some-cjs-package'` (a SyntaxError for Node's loader when the package's
// exports cannot be detected statically) loads under OpenClaw, and must here. The native
// attempt is Node's `import()` with the SDK resolution hooks above; the fallback is jiti with
// the SDK aliases, taken only for errors jiti's loading can fix (a module format or resolution
// Node refuses), so a plugin's own failure is reported as itself and its top-level code does
// not run twice.
//
// A failure is classified where it happens (the error object is here) and sent with the
// `initialize` error as `data.load`: {kind, module, line, column, specifier, package,
// exportName, stderrTail}. See crates/plugin/src/load_error.rs for the kinds and fixes.

// jiti: the plugin's own (as OpenClaw loads it), else the copy vendored next to this runner.
async function loadJiti(root, entry) {
  const candidates = [];
  try {
    candidates.push(createRequire(path.join(root, 'package.json')).resolve('jiti'));
  } catch {
    // not installed by the plugin
  }
  candidates.push(path.join(here, 'vendor', 'jiti', 'lib', 'jiti.mjs'));
  for (const candidate of candidates) {
    if (!fs.existsSync(candidate)) continue;
    const mod = await import(pathToFileURL(candidate).href);
    const createJiti = mod.createJiti || (mod.default && mod.default.createJiti) || mod.default;
    if (typeof createJiti === 'function') return createJiti;
  }
  throw new Error(
    `plugin entry ${entry} needs jiti, which was found neither in the plugin's node_modules nor next to the clawctx runner (${path.join(here, 'vendor', 'jiti')}); install jiti in the plugin (npm install jiti) or point the manifest at built JavaScript`,
  );
}

// jiti's compiled output is cached on disk only in the directory the host names
// (`CLAWCTX_JITI_CACHE_DIR`: under the state dir's runtime directory, one per plugin, private to
// its user), never in jiti's default places (the plugin's node_modules, or the shared temporary
// directory, where another user could plant code). jiti keys each file by its path and checks
// a hash of its source (and jiti's version) on every load, so an edited source is compiled
// again. Without the variable nothing is cached and every start compiles (seconds for a large
// plugin on a loaded machine). `cache` is jiti 1's name for the same option.
const jitiCacheDir = process.env.CLAWCTX_JITI_CACHE_DIR || false;

async function importWithJiti(entry, root) {
  const createJiti = await loadJiti(root, entry);
  const alias = Object.fromEntries(Object.entries(SDK_CJS).map(([k, v]) => [k, path.join(here, v)]));
  const jiti = createJiti(pathToFileURL(entry).href, {
    interopDefault: true,
    alias,
    fsCache: jitiCacheDir,
    cache: jitiCacheDir,
    moduleCache: true,
  });
  return typeof jiti.import === 'function' ? await jiti.import(entry) : jiti(entry);
}

const NOT_FOUND = /Cannot find (module|package) '([^']+)'/;
const NO_SUCH_EXPORT = /The requested module '([^']+)' does not provide an export named '([^']+)'/;
// Errors of Node's own loader that jiti's loading does not have: a named import Node cannot
// see in a CommonJS module, ES syntax in a file Node takes for CommonJS (and the reverse),
// extensionless or directory imports, JSON without import attributes.
const JITI_FIXES_CODES = new Set([
  'ERR_REQUIRE_ESM',
  'ERR_UNKNOWN_FILE_EXTENSION',
  'ERR_UNSUPPORTED_DIR_IMPORT',
  'ERR_IMPORT_ASSERTION_TYPE_MISSING',
  'ERR_IMPORT_ATTRIBUTE_MISSING',
]);
const CJS_IN_ESM_SCOPE = /\b(require|module|exports|__dirname|__filename) is not defined in ES module scope/;

function isPathSpecifier(spec) {
  return spec.startsWith('./') || spec.startsWith('../') || spec.startsWith('/') || spec.startsWith('file:');
}

// Whether a SyntaxError comes from parsing or linking a module (a location header first, or
// Node's compiler as the first frame), not from code that ran (`JSON.parse` at top level).
function isParseError(err) {
  if (!err || err.name !== 'SyntaxError') return false;
  const lines = String(err.stack || '').split('\n');
  if (!lines[0].startsWith('SyntaxError') && LOCATION.test(lines[0])) return true;
  const frame = lines.find((l) => l.trim().startsWith('at '));
  return frame === undefined || frame.includes('node:internal/');
}

function nativeFailureJitiMayFix(err) {
  if (!err || typeof err !== 'object') return false;
  const message = String(err.message || '');
  if (isParseError(err)) {
    // A name the clawctx SDK does not export stays an error: under jiti it would only become
    // `undefined` at the call site.
    const m = NO_SUCH_EXPORT.exec(message);
    return !(m && isSdkSpecifier(m[1]));
  }
  if (JITI_FIXES_CODES.has(err.code)) return true;
  if (err.code === 'ERR_MODULE_NOT_FOUND') {
    const m = NOT_FOUND.exec(message);
    // A file Node's ES resolution did not find may be an extensionless import jiti resolves; a
    // package that is not installed is not installed for jiti either.
    return Boolean(m && m[1] === 'module' && isPathSpecifier(m[2]));
  }
  return err.name === 'ReferenceError' && CJS_IN_ESM_SCOPE.test(message);
}

function loadFailure(message, load, cause) {
  const err = new Error(message);
  err.clawctxKind = 'load';
  err.clawctxLoad = load;
  if (cause && cause.stack) err.stack = `${message}\n${cause.stack}`;
  return err;
}

// A path from a stack frame or message: `file:///x/y.js:3:5` or `/x/y.js:3:5`.
const LOCATION = /((?:file:\/\/)?\/[^\s():'"]+):(\d+)(?::(\d+))?/;

function locate(text) {
  const m = LOCATION.exec(String(text || ''));
  if (!m) return {};
  const file = m[1].startsWith('file:') ? fileURLToPath(m[1]) : m[1];
  return { module: file, line: Number(m[2]), column: m[3] !== undefined ? Number(m[3]) : undefined };
}

// The first stack frame in the plugin's own files (not the runner, not Node's internals).
function pluginFrame(err, root) {
  const stack = String((err && err.stack) || '');
  for (const line of stack.split('\n')) {
    if (!line.trim().startsWith('at ')) continue;
    const loc = locate(line);
    if (loc.module && loc.module.startsWith(root + path.sep) && !loc.module.startsWith(here + path.sep)) return loc;
  }
  return {};
}

function packageName(spec) {
  const parts = spec.split('/');
  return spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

// Classifies an error thrown while importing the entry.
function importFailure(err, entry, root) {
  const message = String((err && err.message) || err);
  const text = `failed to load plugin: ${message.split('\n')[0].trim()}`;
  const missing = NOT_FOUND.exec(message);
  if (missing && (err.code === 'ERR_MODULE_NOT_FOUND' || err.code === 'MODULE_NOT_FOUND' || /Cannot find/.test(message))) {
    const spec = missing[2];
    const from = /imported from (\S+?)[:,]?(?:\s|$)/.exec(message);
    const required = (err.requireStack && err.requireStack[0]) || (/Require stack:\n- (\S+)/.exec(message) || [])[1];
    let importer = (from && from[1]) || required;
    if (importer && importer.startsWith('file:')) importer = fileURLToPath(importer);
    const load = { module: importer };
    if (isSdkSpecifier(spec)) return loadFailure(text, { ...load, kind: 'missing-sdk-module', specifier: spec }, err);
    if (isPathSpecifier(spec) || path.isAbsolute(spec)) return loadFailure(text, { ...load, kind: 'missing-module', specifier: spec }, err);
    return loadFailure(text, { ...load, kind: 'missing-package', specifier: spec, package: packageName(spec) }, err);
  }
  const noExport = NO_SUCH_EXPORT.exec(message);
  if (noExport && isSdkSpecifier(noExport[1])) {
    return loadFailure(text, { kind: 'missing-sdk-export', specifier: noExport[1], exportName: noExport[2], ...locate(err.stack) }, err);
  }
  // Babel's parse errors (jiti) name the file as ` /path:line:col` in the message; V8 names it
  // in the first line of the stack for CommonJS and for ES link errors.
  if (isParseError(err) || /^(?:Parse|Syntax)Error\b/.test(message)) {
    const at = locate(message).module ? locate(message) : locate(String(err.stack || '').split('\n')[0]);
    return loadFailure(text, { kind: 'syntax', ...at }, err);
  }
  return loadFailure(text, { kind: 'import-threw', ...pluginFrame(err, root) }, err);
}

async function importEntry(entry, root) {
  if (isTypeScript(entry)) {
    try {
      return await importWithJiti(entry, root);
    } catch (err) {
      throw importFailure(err, entry, root);
    }
  }
  let nativeError;
  try {
    return await import(pathToFileURL(entry).href);
  } catch (err) {
    if (!nativeFailureJitiMayFix(err)) throw importFailure(err, entry, root);
    nativeError = err;
  }
  try {
    const mod = await importWithJiti(entry, root);
    hostLog('debug', [`loaded ${entry} through jiti: Node's own loader refused it (${String(nativeError.message).split('\n')[0]})`]);
    return mod;
  } catch (err) {
    // jiti's error names the module (a parse error's file and line; V8's ES parse errors do
    // not), and it is what stands in the way once the native refusal is worked around.
    const failure = importFailure(err, entry, root);
    failure.clawctxLoad.nativeError = String(nativeError.message).split('\n')[0];
    throw failure;
  }
}

// OpenClaw's resolvePluginModuleExport: the module with its nested `default`s unwrapped, then
// the module itself, then the `default` and `module` members of objects met on the way (at most
// 12 candidates): the first function is `register`; the first object with a `register` (or,
// as older OpenClaw read it, `activate`) function is the plugin's definition.
function resolvePluginModuleExport(mod) {
  let unwrapped = mod;
  const unwrappedSeen = new Set();
  while (unwrapped && typeof unwrapped === 'object' && 'default' in unwrapped && !unwrappedSeen.has(unwrapped)) {
    unwrappedSeen.add(unwrapped);
    unwrapped = unwrapped.default;
  }
  const candidates = [unwrapped, mod];
  const seen = new Set();
  for (let i = 0; i < candidates.length && i < 12; i++) {
    const c = candidates[i];
    if (seen.has(c)) continue;
    seen.add(c);
    if (typeof c === 'function') return { register: c };
    if (c && typeof c === 'object') {
      const register = typeof c.register === 'function' ? c.register : c.activate;
      if (typeof register === 'function') return { definition: c, register: register.bind(c) };
      for (const key of ['default', 'module']) if (key in c) candidates.push(c[key]);
    }
  }
  return {};
}

// What a module without a register function exports, in words: the members of its (default)
// export.
function exportedNames(mod) {
  let shown = mod;
  while (shown && typeof shown === 'object' && 'default' in shown && shown.default !== shown) shown = shown.default;
  try {
    if (shown && typeof shown === 'object') {
      const names = Object.keys(shown);
      return names.length > 0 ? `{ ${names.join(', ')} }` : 'nothing';
    }
    return shown === undefined ? 'nothing' : `a ${typeof shown}`;
  } catch {
    return 'nothing that can be listed';
  }
}

// What the plugin writes to stderr while it loads (console output included: stdout is sent
// there), kept for the load error. Node writes the same bytes to the real stderr, whose tail
// the host keeps too; this copy is exact and travels with the error.
const LOAD_STDERR_LIMIT = 8 * 1024;
function captureStderr() {
  const chunks = [];
  let size = 0;
  let on = true;
  const original = process.stderr.write;
  process.stderr.write = function writeAndKeep(chunk, ...rest) {
    if (on) {
      const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
      chunks.push(text);
      size += text.length;
      while (size > LOAD_STDERR_LIMIT && chunks.length > 1) size -= chunks.shift().length;
    }
    return original.call(this, chunk, ...rest);
  };
  const tail = () => {
    const text = chunks.join('');
    return text.slice(Math.max(0, text.length - LOAD_STDERR_LIMIT)).trim();
  };
  const stop = () => {
    on = false;
  };
  return {
    stop,
    // For `.catch`: stops capturing, adds the tail to a load error, throws it on.
    fail(err) {
      stop();
      if (err && err.clawctxLoad) err.clawctxLoad.stderrTail = tail();
      throw err;
    },
  };
}

// Imports the entry and finds its register function. Throws classified load errors.
async function loadRegister(plugin) {
  const entry = plugin.entry;
  const root = plugin.root || path.dirname(entry);
  installSdkResolution(entry);
  const mod = await importEntry(entry, root);
  const { definition, register } = resolvePluginModuleExport(mod);
  if (!register) {
    throw loadFailure(`plugin export missing register/activate: ${entry} exports ${exportedNames(mod)}`, {
      kind: 'no-register',
      module: entry,
    });
  }
  const defined = definition && typeof definition.id === 'string' ? definition.id.trim() : '';
  if (defined && plugin.id && defined !== plugin.id) {
    throw loadFailure(`plugin id mismatch (config uses "${plugin.id}", export uses "${defined}")`, {
      kind: 'id-mismatch',
      module: entry,
    });
  }
  return register;
}

// Runs the plugin's register(api). A throw becomes OpenClaw's `plugin failed during register`.
async function callRegister(register, api, plugin) {
  try {
    await register(api);
  } catch (err) {
    const root = plugin.root || path.dirname(plugin.entry);
    const message = err && typeof err.message === 'string' ? err.message : String(err);
    throw loadFailure(`plugin failed during register: ${message}`, { kind: 'register-threw', ...pluginFrame(err, root) }, err);
  }
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
  // Tools made by a factory (`api.registerTool((ctx) => tool)`), by name: OpenClaw calls the
  // factory for each run with the run's session (`ctx.sessionKey`, `ctx.sessionId`), so a call
  // runs the tool the factory makes for the calling session.
  toolFactories: new Map(),
  toolContext: {},
  // api.on registrations: {id, hookName, handler, priority, timeoutMs, modelOverridesOnly}.
  hooks: [],
  init: null,
  instances: new Map(),
  rollbacks: new Map(),
  controllers: new Map(),
  nextInstance: 1,
  nextRollback: 1,
  nextToolCall: 1,
  // Message references: whether the host asked for them, the messages held by id (deeply
  // frozen: the same objects are handed to every call), and whether this plugin turned out to
  // write to its input messages, after which it gets copies.
  messageRefs: false,
  refs: new Map(),
  copyMessages: false,
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
  const runtime = { llm };
  const api = {
    id: plugin.id,
    name: plugin.name || plugin.id,
    version: plugin.version,
    source: plugin.entry,
    rootDir: plugin.root,
    config: factoryContext.config == null ? {} : factoryContext.config,
    pluginConfig: init.pluginConfig == null ? {} : init.pluginConfig,
    logger,
    get llm() {
      useCallStore();
      return llm;
    },
    get runtime() {
      useCallStore();
      return runtime;
    },
    registerContextEngine(id, factory) {
      if (typeof id !== 'string' || id.trim() === '') throw new TypeError('registerContextEngine(id, factory): id must be a non-empty string');
      if (state.engines.has(id)) throw new Error(`context engine "${id}" is already registered by this plugin`);
      state.engines.set(id, factory);
    },
    registerTool(tool, opts) {
      state.toolRegistrations.push({ tool, opts });
    },
    on(hookName, handler, opts) {
      registerHook(plugin.id, factoryContext.config, hookName, handler, opts, logger);
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

// --- hooks (api.on) ---------------------------------------------------------------------------
// Handlers stay here; the handshake reports them ({id, name, priority}) and the host runs them
// with `hook/run`, naming the handlers in the order they run (docs/plugin-protocol.md, "Hooks").
// Registration follows OpenClaw's registry: unknown names are dropped, and the operator's
// `plugins.entries.<id>.hooks` gates apply (prompt injection, conversation access).
const HOOK_NAMES = new Set([
  'before_model_resolve', 'agent_turn_prepare', 'before_prompt_build', 'before_agent_start', 'before_agent_reply',
  'model_call_started', 'model_call_ended', 'llm_input', 'llm_output', 'before_agent_finalize', 'agent_end',
  'before_compaction', 'after_compaction', 'before_reset', 'inbound_claim', 'message_received', 'message_sending',
  'message_sent', 'before_tool_call', 'after_tool_call', 'tool_result_persist', 'before_message_write',
  'session_start', 'session_end', 'subagent_spawning', 'subagent_delivery_target', 'subagent_spawned',
  'subagent_ended', 'gateway_start', 'gateway_stop', 'heartbeat_prompt_contribution', 'cron_changed',
  'before_dispatch', 'reply_dispatch', 'before_install', 'before_agent_run', 'reply_payload_sending',
  'resolve_exec_env', 'channel_pairing_requested', 'poll_vote_received', 'subagent_progress', 'cron_reconciled',
  'skill_proposal_evaluate', 'skill_proposal_changed', 'skill_changed', 'deactivate',
]);
const PROMPT_INJECTION_HOOKS = new Set(['agent_turn_prepare', 'before_prompt_build', 'before_agent_start', 'heartbeat_prompt_contribution']);
const CONVERSATION_HOOKS = new Set([
  'before_model_resolve', 'before_agent_reply', 'llm_input', 'llm_output', 'before_agent_finalize', 'agent_end', 'before_agent_run',
]);
// What `before_agent_start` keeps when prompt injection is off: its model overrides.
const MODEL_OVERRIDE_KEYS = ['modelOverride', 'providerOverride'];
const MAX_HOOK_TIMEOUT_MS = 600000;

function hooksConfig(config, pluginId) {
  const entry = config && config.plugins && config.plugins.entries && config.plugins.entries[pluginId];
  return entry && entry.hooks && typeof entry.hooks === 'object' ? entry.hooks : {};
}

function validTimeout(ms) {
  return Number.isInteger(ms) && ms > 0 && ms <= MAX_HOOK_TIMEOUT_MS ? ms : undefined;
}

function registerHook(pluginId, config, hookName, handler, opts, logger) {
  if (typeof handler !== 'function') {
    logger.warn(`api.on("${hookName}") needs a handler function; ignored`);
    return;
  }
  if (!HOOK_NAMES.has(hookName)) {
    logger.warn(`unknown typed hook "${hookName}" ignored`);
    return;
  }
  const gates = hooksConfig(config, pluginId);
  let modelOverridesOnly = false;
  if (PROMPT_INJECTION_HOOKS.has(hookName) && gates.allowPromptInjection === false) {
    if (hookName === 'before_agent_start') {
      modelOverridesOnly = true;
    } else {
      logger.warn(`typed hook "${hookName}" blocked by plugins.entries.${pluginId}.hooks.allowPromptInjection=false`);
      return;
    }
  }
  if (CONVERSATION_HOOKS.has(hookName) && gates.allowConversationAccess !== true) {
    logger.warn(
      `typed hook "${hookName}" blocked because non-bundled plugins must set plugins.entries.${pluginId}.hooks.allowConversationAccess=true`,
    );
    return;
  }
  const o = opts && typeof opts === 'object' ? opts : {};
  state.hooks.push({
    id: state.hooks.length,
    hookName,
    handler,
    priority: typeof o.priority === 'number' && Number.isFinite(o.priority) ? o.priority : 0,
    timeoutMs: validTimeout(o.timeoutMs),
    modelOverridesOnly,
  });
}

// Per-handler budget: plugins.entries.<id>.hooks.timeouts.<hook> > .hooks.timeoutMs > the
// handler's own `timeoutMs` > the hook's default (sent by the host).
function handlerTimeout(h, defaultMs) {
  const gates = hooksConfig(state.init && state.init.factoryContext && state.init.factoryContext.config, state.plugin && state.plugin.id);
  const perHook = gates.timeouts && typeof gates.timeouts === 'object' ? validTimeout(gates.timeouts[h.hookName]) : undefined;
  return perHook ?? validTimeout(gates.timeoutMs) ?? h.timeoutMs ?? validTimeout(defaultMs);
}

function hookResult(h, value) {
  if (value === undefined || value === null) return { id: h.id, value: null };
  let v;
  try {
    v = cloneJson(value);
  } catch (err) {
    return { id: h.id, error: `its result is not JSON: ${err && err.message ? err.message : String(err)}` };
  }
  if (h.modelOverridesOnly && v && typeof v === 'object') {
    v = Object.fromEntries(MODEL_OVERRIDE_KEYS.filter((k) => k in v).map((k) => [k, v[k]]));
  }
  return { id: h.id, value: v };
}

function hookError(h, err) {
  return { id: h.id, error: err && typeof err.message === 'string' ? err.message : String(err) };
}

async function runAsyncHandler(h, event, ctx, deadline, defaultMs) {
  const own = handlerTimeout(h, defaultMs);
  const left = deadline - Date.now();
  const ms = Math.floor(Math.min(own ?? Infinity, left));
  if (ms <= 0) return hookError(h, new Error('not run: the time budget of the hook call was used up'));
  let timer;
  try {
    const work = Promise.resolve().then(() => h.handler(event, ctx));
    const value = Number.isFinite(ms)
      ? await Promise.race([
          work,
          new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error(`timed out after ${ms}ms`)), ms);
          }),
        ])
      : await work;
    return hookResult(h, value);
  } catch (err) {
    return hookError(h, err);
  } finally {
    if (timer) clearTimeout(timer);
  }
}

// tool_result_persist, before_message_write: synchronous, as in OpenClaw.
function runSyncHandler(h, event, ctx) {
  try {
    const out = h.handler(event, ctx);
    if (out && typeof out.then === 'function') {
      if (typeof out.catch === 'function') out.catch(() => {});
      hostLog('warn', [
        `[hooks] ${h.hookName} handler from ${state.plugin && state.plugin.id} returned a Promise; this hook is synchronous and the result was ignored.`,
      ]);
      return { id: h.id, value: null };
    }
    return hookResult(h, out);
  } catch (err) {
    return hookError(h, err);
  }
}

function isTerminal(v) {
  return v !== null && typeof v === 'object' && (v.block === true || v.cancel === true);
}

async function runHook(params) {
  const hook = params.hook;
  const byId = new Map(state.hooks.filter((h) => h.hookName === hook).map((h) => [h.id, h]));
  const ids = Array.isArray(params.handlers) ? params.handlers : [...byId.keys()];
  const list = ids.map((id) => byId.get(id)).filter(Boolean);
  const budget = typeof params.budgetMs === 'number' && params.budgetMs > 0 ? params.budgetMs : Infinity;
  const deadline = Date.now() + budget;
  const event = params.event && typeof params.event === 'object' ? params.event : {};
  const ctx = params.ctx && typeof params.ctx === 'object' ? params.ctx : {};
  if (params.mode === 'parallel') {
    return { results: await Promise.all(list.map((h) => runAsyncHandler(h, event, ctx, deadline, params.defaultTimeoutMs))) };
  }
  const results = [];
  let current = event;
  for (const h of list) {
    let r;
    if (params.mode === 'chain') {
      r = runSyncHandler(h, Object.assign({}, current), ctx);
      if (r.value && r.value.message && typeof r.value.message === 'object') current = Object.assign({}, current, { message: r.value.message });
    } else {
      const ev = params.isolate ? structuredClone(event) : event;
      r = await runAsyncHandler(h, ev, ctx, deadline, params.defaultTimeoutMs);
    }
    results.push(r);
    if (isTerminal(r.value)) break;
  }
  return { results };
}

function resolveTools(init) {
  const ctx = {
    config: init.factoryContext && init.factoryContext.config,
    agentDir: init.factoryContext && init.factoryContext.agentDir,
    workspaceDir: init.factoryContext && init.factoryContext.workspaceDir,
    pluginConfig: init.pluginConfig,
  };
  state.toolContext = ctx;
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
      if (typeof tool === 'function') state.toolFactories.set(name, tool);
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
    const loading = captureStderr();
    const register = await loadRegister(state.plugin).catch(loading.fail);
    state.init = params;
    await callRegister(register, makeApi(params), state.plugin).catch(loading.fail);
    loading.stop();
    const tools = resolveTools(params);
    state.messageRefs = Boolean(params.capabilities && params.capabilities.messageRefs === true);
    return {
      protocolVersion: PROTOCOL_VERSION,
      capabilities: { messageRefs: state.messageRefs },
      runner: { name: 'clawctx-node-runner', version: RUNNER_VERSION, node: process.version },
      engines: [...state.engines.entries()].map(([id, f]) => engineDecl(id, f)),
      tools,
      hooks: state.hooks.map((h) => ({ id: h.id, name: h.hookName, priority: h.priority })),
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
    let tool = state.tools.get(params.name);
    if (!tool) throw new Error(`unknown tool "${params.name}"`);
    const ctx = params.context || {};
    const factory = state.toolFactories.get(params.name);
    if (factory && (ctx.sessionKey || ctx.sessionId)) {
      const session = { ...state.toolContext };
      if (ctx.sessionKey) session.sessionKey = ctx.sessionKey;
      if (ctx.sessionId) session.sessionId = ctx.sessionId;
      const produced = factory(session);
      const list = Array.isArray(produced) ? produced : produced ? [produced] : [];
      tool = list.find((t) => t && t.name === params.name && typeof t.execute === 'function') || tool;
    }
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

  async 'hook/run'(params) {
    return await runHook(params);
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

// --- message references -------------------------------------------------------------------------
const UNKNOWN_MESSAGE_REF = -32010;
// Each held message carries its id and the last call it was handed to under a symbol key
// (added before it is frozen; invisible to JSON and to Object.keys).
const HELD = Symbol('clawctx.held');
let nextCallSeq = 1;

function deepFreeze(v) {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const k of Object.keys(v)) deepFreeze(v[k]);
  }
  return v;
}

function refError(message) {
  const err = new Error(message);
  err.rpcCode = UNKNOWN_MESSAGE_REF;
  return err;
}

// Resolves `params.messages` of a request that carries `messageRefs`: the ids of the
// messages, the new ones defined in `messageRefs.define` as `[id, message]`. Runs before the
// first await of the call, so requests are resolved in the order they arrived, which is the
// order the host defined their messages in. Answers the messages and this call's sequence
// number (what `referenceResult` checks a returned message against).
function resolveMessageRefs(p, housekeeping) {
  if (housekeeping.reset === true) state.refs.clear();
  if (Array.isArray(housekeeping.define)) {
    for (const def of housekeeping.define) {
      const id = Array.isArray(def) ? def[0] : undefined;
      const m = Array.isArray(def) ? def[1] : undefined;
      if (typeof id !== 'number' || m === null || typeof m !== 'object') {
        throw refError('messageRefs.define holds an entry that is not [id, message]');
      }
      Object.defineProperty(m, HELD, { value: { id, call: 0 } });
      state.refs.set(id, deepFreeze(m));
    }
  }
  const call = nextCallSeq++;
  const ids = Array.isArray(p.messages) ? p.messages : [];
  const messages = new Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const m = state.refs.get(ids[i]);
    if (m === undefined) throw refError(`message reference ${ids[i]} is not held by the runner`);
    m[HELD].call = call;
    messages[i] = m;
  }
  if (Array.isArray(housekeeping.drop)) for (const id of housekeeping.drop) state.refs.delete(id);
  return { messages, call };
}

// What V8 says when strict code writes to a frozen object.
function isFrozenWrite(err) {
  return (
    err !== null &&
    typeof err === 'object' &&
    err.name === 'TypeError' &&
    /read only property|not extensible|Cannot delete property|Cannot redefine property/.test(String(err.message))
  );
}

// A result whose messages include messages of this call handed back as they are: those
// become their ids. Only this call's messages qualify (the host trusts no other id); one that a
// later, overlapping call was also given goes in full, which is merely slower.
function referenceResult(result, call) {
  if (result === null || typeof result !== 'object' || !Array.isArray(result.messages)) return result;
  let any = false;
  const out = result.messages.map((m) => {
    const held = m !== null && typeof m === 'object' ? m[HELD] : undefined;
    if (held === undefined || held.call !== call) return m;
    any = true;
    return held.id;
  });
  return any ? Object.assign({}, result, { messages: out }) : result;
}

async function callEngine(method, params, id) {
  const instanceId = String(params.instanceId);
  const engine = state.instances.get(instanceId);
  if (!engine) throw new Error(`unknown engine instance ${instanceId}`);
  if (typeof engine[method] !== 'function') throw new Error(`context engine does not implement ${method}()`);
  const p = params.params && typeof params.params === 'object' ? params.params : {};
  // With message references, `byReference` is this call's sequence number while the engine
  // gets the held (frozen) messages themselves; copies carry no reference.
  let byReference = 0;
  let resolved = null;
  if (params.messageRefs && typeof params.messageRefs === 'object') {
    resolved = resolveMessageRefs(p, params.messageRefs);
    if (state.copyMessages) {
      p.messages = resolved.messages.map((m) => structuredClone(m));
    } else {
      p.messages = resolved.messages;
      byReference = resolved.call;
    }
  }
  if (method === 'assemble' && Array.isArray(p.availableTools)) p.availableTools = new Set(p.availableTools);
  if (p.runtimeContext && typeof p.runtimeContext === 'object') {
    p.runtimeContext.llm = { complete: (request) => llmCompleteFor(id, request) };
    p.runtimeContext.rewriteTranscriptEntries = (request) =>
      hostRequest('host/rewriteTranscriptEntries', { request, callId: typeof id === 'number' ? id : null });
  }
  // A controller only when the engine gets its signal: without one, a cancel could not reach
  // the engine anyway (the host stops waiting on its side).
  const abortable = params.abortable || method === 'compact';
  if (abortable) {
    const controller = new AbortController();
    state.controllers.set(id, controller);
    p.abortSignal = controller.signal;
  }
  const pristine = byReference ? Object.assign({}, p) : null;
  inflight.set(id, { sessionId: p.sessionId, sessionKey: p.sessionKey });
  try {
    let result;
    try {
      result = await engine[method](p);
    } catch (err) {
      // The engine wrote to a message it was given (held messages are frozen). OpenClaw hands
      // engines the live history, so that is legal there: from now on this plugin gets copies,
      // and this call runs again on copies.
      if (!byReference || !isFrozenWrite(err)) throw err;
      state.copyMessages = true;
      byReference = 0;
      hostLog('warn', [
        `context engine "${instanceId}" modified an input message (${err.message}); it gets copies of its messages from now on, which is slower`,
      ]);
      const again = Object.assign({}, pristine, { messages: resolved.messages.map((m) => structuredClone(m)) });
      result = await (callStoreInUse ? callStore.run(id, () => engine[method](again)) : engine[method](again));
    }
    if (method === 'prepareSubagentSpawn') {
      if (result && typeof result.rollback === 'function') {
        const rollbackId = String(state.nextRollback++);
        state.rollbacks.set(rollbackId, result.rollback.bind(result));
        return { hasRollback: true, rollbackId };
      }
      return { hasRollback: false, rollbackId: null };
    }
    if (byReference) result = referenceResult(result, byReference);
    return result === undefined ? null : result;
  } finally {
    inflight.delete(id);
    if (abortable) state.controllers.delete(id);
  }
}

function toRpcError(err) {
  const message = err && typeof err.message === 'string' ? err.message : String(err);
  return {
    code: err && typeof err.rpcCode === 'number' ? err.rpcCode : -32000,
    message,
    data: { name: err && err.name, kind: err && err.clawctxKind, stack: err && err.stack, load: err && err.clawctxLoad },
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
      if (callStoreInUse) {
        callStore.run(msg.id, () => {
          handleRequest(msg);
        });
      } else {
        syncCallId = msg.id;
        try {
          handleRequest(msg);
        } finally {
          syncCallId = undefined;
        }
      }
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

// --- stdin framing ----------------------------------------------------------------------------
// One message per line. A chunk usually holds whole lines; a line split across chunks is kept
// as a list of pieces and joined once.
let partial = [];

function onLine(buf) {
  let text = buf.toString('utf8');
  if (text.endsWith('\r')) text = text.slice(0, -1);
  if (!text.trim()) return;
  let msg;
  try {
    msg = JSON.parse(text);
  } catch (err) {
    process.stderr.write(`clawctx runner: invalid JSON from host: ${err.message}\n`);
    return;
  }
  onMessage(msg);
}

process.stdin.on('data', (chunk) => {
  let start = 0;
  let nl = chunk.indexOf(10);
  while (nl !== -1) {
    if (partial.length > 0) {
      partial.push(chunk.subarray(start, nl));
      const line = Buffer.concat(partial);
      partial = [];
      onLine(line);
    } else {
      onLine(chunk.subarray(start, nl));
    }
    start = nl + 1;
    nl = chunk.indexOf(10, start);
  }
  if (start < chunk.length) partial.push(chunk.subarray(start));
});
process.stdin.on('end', () => {
  if (partial.length > 0) onLine(Buffer.concat(partial));
  process.exit(0);
});
