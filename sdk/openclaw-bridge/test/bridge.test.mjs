// The bridge against a fake OpenClaw `api` and a fake gateway on loopback (port 0).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { readFileSync, mkdtempSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import register, {
  createEngine,
  resolveConfig,
  transcriptSync,
  recallTools,
  memoryCursorStore,
  fileCursorStore,
  worthStoring,
  RECALL_TOOLS,
} from '../index.js';

// Never the runner's own OpenClaw state dir: every engine here keeps its cursors in a scratch one.
const STATE = mkdtempSync(path.join(os.tmpdir(), 'bridge-test-'));
process.env.OPENCLAW_STATE_DIR = STATE;

const TOKEN = 'secret-token-8086';
const requests = [];
let methods = ['ingest', 'assemble', 'compact', 'ingestBatch', 'bootstrap', 'maintain', 'afterTurn', 'commitTurn', 'onSubagentEnded'];
let failWith = null;
let failCode = null;
let server;
let url;

before(async () => {
  server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      requests.push({ method: req.method, path: req.url, auth: req.headers.authorization, body: body ? JSON.parse(body) : null });
      res.setHeader('content-type', 'application/json');
      if (failWith) {
        res.statusCode = failWith;
        res.end(JSON.stringify({ error: { message: 'the engine failed', type: 'server_error', ...(failCode ? { code: failCode } : {}) } }));
        return;
      }
      if (req.url === '/v1/engine/info') {
        res.end(JSON.stringify({ info: { id: 'lossless', name: 'Lossless', ownsCompaction: true }, methods, quarantined: [] }));
        return;
      }
      const m = req.url.replace('/v1/engine/', '');
      const results = {
        ingest: { ingested: true },
        ingestBatch: { ingestedCount: 0 },
        commitTurn: { status: 'committed' },
        lcm_grep: { hits: [{ id: 'msg_1', snippet: 'Ferdinand' }] },
        assemble: { messages: [{ role: 'user', content: 'hi' }], estimatedTokens: 3 },
        compact: { ok: true, compacted: false },
        afterTurn: null,
        onSubagentEnded: null,
        prepareSubagentSpawn:
          body && JSON.parse(body).contextMode === 'fork' ? { hasRollback: true, rollbackId: '7' } : { hasRollback: false, rollbackId: null },
        rollback: null,
      };
      res.end(JSON.stringify(m in results ? results[m] : { echo: m }));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((r) => server.close(r)));

function fakeApi(pluginConfig) {
  const engines = new Map();
  const tools = [];
  return {
    id: 'clawctx',
    pluginConfig,
    registerContextEngine(id, factory) {
      engines.set(id, factory);
    },
    registerTool(tool, opts) {
      tools.push({ tool, opts });
    },
    engines,
    tools,
  };
}

test('the manifest is an OpenClaw context-engine plugin with the config keys', () => {
  const manifest = JSON.parse(readFileSync(new URL('../openclaw.plugin.json', import.meta.url), 'utf8'));
  assert.equal(manifest.id, 'clawctx', 'the plugin id is the engine id: OpenClaw selects engines by plugin id');
  assert.equal(manifest.kind, 'context-engine');
  const props = manifest.configSchema.properties;
  for (const k of ['gatewayUrl', 'token', 'tokenEnv', 'engineId', 'timeoutMs']) assert.ok(props[k], k);
  assert.equal(props.gatewayUrl.default, 'http://127.0.0.1:18789');
  assert.equal(props.engineId.default, undefined, 'engineId is ignored, kept only so old configs validate');
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.dependencies, undefined, 'no runtime dependencies');
});

test('register calls registerContextEngine with the plugin id, clawctx, whatever engineId says', async () => {
  const api = fakeApi({});
  register(api);
  assert.deepEqual([...api.engines.keys()], ['clawctx']);
  assert.equal(typeof api.engines.get('clawctx'), 'function');
  const named = fakeApi({ engineId: 'lcm', gatewayUrl: url });
  register(named);
  assert.deepEqual([...named.engines.keys()], ['clawctx']);
  const engine = await named.engines.get('clawctx')();
  assert.equal(engine.info.id, 'clawctx');
  assert.equal(engine.info.ownsCompaction, true);
  assert.match(engine.info.name, /Lossless/);
});

test('config defaults and the token from an env var', () => {
  assert.deepEqual(resolveConfig({}, {}), { gatewayUrl: 'http://127.0.0.1:18789', token: undefined, engineId: 'clawctx', timeoutMs: 120000 });
  assert.equal(resolveConfig({ tokenEnv: 'BRIDGE_T' }, { BRIDGE_T: 'x1' }).token, 'x1');
  assert.equal(resolveConfig({ token: 'a', tokenEnv: 'BRIDGE_T' }, { BRIDGE_T: 'x1' }).token, 'a');
  assert.equal(resolveConfig({ gatewayUrl: 'http://h:1/' }, {}).gatewayUrl, 'http://h:1');
});

test('every method forwards its params to POST /v1/engine/<method> with the token, results as given', async () => {
  requests.length = 0;
  const engine = await createEngine({ gatewayUrl: url, token: TOKEN });
  assert.deepEqual(requests[0], { method: 'GET', path: '/v1/engine/info', auth: `Bearer ${TOKEN}`, body: null });
  const calls = {
    ingest: { sessionId: 's', sessionKey: 'agent:main:t', message: { role: 'user', content: 'hello' } },
    ingestBatch: { sessionId: 's', messages: [{ role: 'user', content: 'a' }] },
    assemble: { sessionId: 's', messages: [], tokenBudget: 1000 },
    compact: { sessionId: 's', tokenBudget: 100, force: true },
    afterTurn: { sessionId: 's', messages: [], prePromptMessageCount: 0 },
    bootstrap: { sessionId: 's', sessionFile: 'f.jsonl' },
    maintain: { sessionId: 's' },
    commitTurn: { sessionId: 's', turnId: 't1' },
    onSubagentEnded: { childSessionKey: 'agent:main:child', reason: 'completed' },
  };
  const expected = {
    ingest: { ingested: true },
    ingestBatch: { ingestedCount: 0 },
    assemble: { messages: [{ role: 'user', content: 'hi' }], estimatedTokens: 3 },
    compact: { ok: true, compacted: false },
    afterTurn: null,
    commitTurn: { status: 'committed' },
    onSubagentEnded: null,
  };
  for (const [m, params] of Object.entries(calls)) {
    assert.equal(typeof engine[m], 'function', m);
    requests.length = 0;
    const result = await engine[m](params);
    assert.deepEqual(result, m in expected ? expected[m] : { echo: m }, m);
    assert.equal(requests.length, 1, m);
    assert.deepEqual(requests[0], { method: 'POST', path: `/v1/engine/${m}`, auth: `Bearer ${TOKEN}`, body: params }, m);
  }
  assert.equal(await engine.dispose(), undefined);
  assert.equal(requests.length, 1, 'dispose is a no-op');
});

test('host objects do not cross: abortSignal dropped, runtimeContext functions dropped, Sets as arrays', async () => {
  const engine = await createEngine({ gatewayUrl: url });
  requests.length = 0;
  const controller = new AbortController();
  await engine.assemble({
    sessionId: 's',
    messages: [],
    availableTools: new Set(['lcm_grep']),
    abortSignal: controller.signal,
    runtimeContext: { currentTokenCount: 7, llm: { complete: async () => ({}) }, rewriteTranscriptEntries: () => {} },
  });
  assert.equal(requests[0].auth, undefined, 'no token configured, no header');
  assert.deepEqual(requests[0].body, { sessionId: 's', messages: [], availableTools: ['lcm_grep'], runtimeContext: { currentTokenCount: 7, llm: {} } });
});

test('an aborted signal aborts the call', async () => {
  const engine = await createEngine({ gatewayUrl: url });
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(engine.compact({ sessionId: 's', abortSignal: controller.signal }), /aborted/);
});

test('prepareSubagentSpawn returns a rollback the gateway runs, or nothing', async () => {
  const saved = methods;
  methods = [...saved, 'prepareSubagentSpawn'];
  try {
    const engine = await createEngine({ gatewayUrl: url, token: TOKEN });
    requests.length = 0;
    const params = { parentSessionKey: 'agent:main:p', childSessionKey: 'agent:main:subagent:c', contextMode: 'fork' };
    const prepared = await engine.prepareSubagentSpawn(params);
    assert.deepEqual(requests[0].body, params);
    assert.equal(requests[0].path, '/v1/engine/prepareSubagentSpawn');
    assert.equal(await prepared.rollback(), undefined);
    assert.deepEqual(requests[1], { method: 'POST', path: '/v1/engine/rollback', auth: `Bearer ${TOKEN}`, body: { rollbackId: '7' } });
    assert.equal(await engine.prepareSubagentSpawn({ ...params, contextMode: 'isolated' }), undefined);
  } finally {
    methods = saved;
  }
  const without = await createEngine({ gatewayUrl: url });
  assert.equal(without.prepareSubagentSpawn, undefined, 'only when the gateway engine has it');
});

test('commitTurn only when the gateway engine has it', async () => {
  const saved = methods;
  methods = ['ingest', 'assemble', 'compact', 'afterTurn'];
  try {
    const engine = await createEngine({ gatewayUrl: url });
    assert.equal(engine.commitTurn, undefined);
    assert.equal(engine.maintain, undefined);
    assert.equal(typeof engine.afterTurn, 'function');
  } finally {
    methods = saved;
  }
});

test('a gateway error throws naming the URL and the status, never the token', async () => {
  const engine = await createEngine({ gatewayUrl: url, token: TOKEN });
  failWith = 500;
  try {
    const err = await engine.ingest({ sessionId: 's', message: { role: 'user', content: 'x' } }).then(() => null, (e) => e);
    assert.ok(err instanceof Error);
    assert.ok(err.message.includes(`${url}/v1/engine/ingest`), err.message);
    assert.match(err.message, /HTTP 500: the engine failed/);
    assert.ok(!err.message.includes(TOKEN), err.message);
    await assert.rejects(createEngine({ gatewayUrl: url, token: TOKEN }), (e) => e.message.includes('/v1/engine/info') && !e.message.includes(TOKEN));
  } finally {
    failWith = null;
  }
});

test('a transcript the gateway may not read makes bootstrap answer not bootstrapped; other refusals throw', async () => {
  const engine = await createEngine({ gatewayUrl: url, token: TOKEN }, { sync: async () => 0 });
  failWith = 403;
  failCode = 'path_not_allowed';
  try {
    const r = await engine.bootstrap({ sessionId: 's', sessionKey: 'agent:main:x', sessionFile: '/elsewhere/s.jsonl' });
    assert.equal(r.bootstrapped, false);
    assert.match(r.reason, /HTTP 403/);
    const err = await engine.ingest({ sessionId: 's', message: { role: 'user', content: 'x' } }).then(() => null, (e) => e);
    assert.ok(err instanceof Error && err.code === 'path_not_allowed', 'only bootstrap turns it into a result');
    failCode = 'engine_error';
    failWith = 500;
    await assert.rejects(engine.bootstrap({ sessionId: 's', sessionFile: 'agent:main:x' }), /HTTP 500/);
  } finally {
    failWith = null;
    failCode = null;
  }
});

test('a down gateway throws naming the URL and the cause, never the token', async () => {
  // A port that was free a moment ago: nothing listens there.
  const probe = net.createServer();
  await new Promise((r) => probe.listen(0, '127.0.0.1', r));
  const port = probe.address().port;
  await new Promise((r) => probe.close(r));
  const down = `http://127.0.0.1:${port}`;
  const err = await createEngine({ gatewayUrl: down, token: TOKEN, timeoutMs: 5000 }).then(() => null, (e) => e);
  assert.ok(err instanceof Error);
  assert.ok(err.message.includes(`${down}/v1/engine/info`), err.message);
  assert.match(err.message, /unreachable \(ECONNREFUSED\)/);
  assert.ok(!err.message.includes(TOKEN), err.message);
});

test('a slow gateway times out', async () => {
  const slow = http.createServer(() => {});
  await new Promise((r) => slow.listen(0, '127.0.0.1', r));
  try {
    const u = `http://127.0.0.1:${slow.address().port}`;
    await assert.rejects(createEngine({ gatewayUrl: u, timeoutMs: 200 }), /timed out after 200 ms/);
  } finally {
    slow.closeAllConnections();
    await new Promise((r) => slow.close(r));
  }
});

// A fake of OpenClaw's transcript runtime: `entries` are the session's visible messages; the
// cursor is the count already read; `resetOnce` answers one reset first.
function fakeTranscript(entries, { resetOnce = false, pageSize = 2 } = {}) {
  const reads = [];
  let reset = resetOnce;
  return {
    reads,
    entries,
    module: {
      async readSessionTranscriptVisibleMessageDelta(params) {
        reads.push(params);
        if (reset) {
          reset = false;
          return { kind: 'reset', cursor: '0', reason: 'generation_mismatch' };
        }
        const from = params.cursor === undefined ? 0 : Number(params.cursor);
        const page = entries.slice(from, from + Math.min(pageSize, params.maxMessages));
        return {
          kind: 'page',
          cursor: String(from + page.length),
          entries: page.map((message, i) => ({ entryId: `e${from + i}`, seq: from + i, message, role: message.role })),
          hasMore: from + page.length < entries.length,
        };
      },
    },
  };
}

test('before assemble and bootstrap, the transcript messages the gateway has not seen go with ingestBatch', async () => {
  const history = [
    { role: 'user', content: 'the invoice is INV-42', timestamp: 1 },
    { role: 'assistant', content: [{ type: 'text', text: 'noted' }], timestamp: 2 },
    { role: 'user', content: 'and the walrus is Ferdinand', timestamp: 3 },
  ];
  const t = fakeTranscript(history);
  const engine = await createEngine({ gatewayUrl: url }, { loadRuntime: async () => t.module });
  requests.length = 0;
  await engine.bootstrap({ sessionId: 's9', sessionKey: 'agent:main:invoice', sessionFile: 'agent:main:invoice' });
  const batches = requests.filter((r) => r.path === '/v1/engine/ingestBatch');
  assert.deepEqual(
    batches.map((r) => r.body.messages.length),
    [2, 1],
    'two pages of the transcript, in order',
  );
  assert.deepEqual(batches.flatMap((r) => r.body.messages), history);
  assert.equal(batches[0].body.sessionKey, 'agent:main:invoice');
  assert.equal(batches[0].body.sessionId, 's9');
  assert.equal(requests.at(-1).path, '/v1/engine/bootstrap', 'the history goes before the call');
  assert.equal(t.reads[0].sessionKey, 'agent:main:invoice');
  assert.equal(t.reads[0].cursor, undefined, 'a new process reads from the start');

  // The next call sends only what was appended since (a turn answered elsewhere, say).
  history.push({ role: 'user', content: 'answered on legacy', timestamp: 4 });
  requests.length = 0;
  await engine.assemble({ sessionId: 's9', sessionKey: 'agent:main:invoice', messages: [], tokenBudget: 1000 });
  assert.deepEqual(
    requests.map((r) => r.path),
    ['/v1/engine/ingestBatch', '/v1/engine/assemble'],
  );
  assert.deepEqual(requests[0].body.messages, [history[3]]);
  requests.length = 0;
  await engine.assemble({ sessionId: 's9', sessionKey: 'agent:main:invoice', messages: [], tokenBudget: 1000 });
  assert.deepEqual(requests.map((r) => r.path), ['/v1/engine/assemble'], 'nothing new, nothing sent');
});

test('a reset cursor reads the transcript again from its start; an unreadable one is skipped', async () => {
  const t = fakeTranscript([{ role: 'user', content: 'a', timestamp: 1 }], { resetOnce: true });
  const sent = [];
  const client = { call: async (m, p) => sent.push([m, p]) };
  const sync = transcriptSync(client, { loadRuntime: async () => t.module });
  assert.equal(await sync({ sessionId: 's', sessionKey: 'k' }), 1);
  assert.equal(t.reads[1].cursor, '0');
  const warnings = [];
  const broken = transcriptSync(client, {
    loadRuntime: async () => ({
      readSessionTranscriptVisibleMessageDelta: async () => {
        throw new Error('Transcript read cursor has crossed the current-turn admission fence');
      },
    }),
    logger: { warn: (m) => warnings.push(m) },
  });
  assert.equal(await broken({ sessionId: 's', sessionKey: 'k' }), 0);
  assert.match(warnings[0], /cannot read the transcript of k/);
  const without = transcriptSync(client, { loadRuntime: async () => null });
  assert.equal(await without({ sessionId: 's' }), 0, 'a host without the module: nothing to do');
});

test("the turn in progress is never history: assemble's read stops before the turn's prompt", async () => {
  const entries = [
    { role: 'user', content: 'm1 first', timestamp: 1 },
    { role: 'assistant', content: [{ type: 'text', text: 'reply to m1' }], timestamp: 2 },
    // OpenClaw's context-hook assemble runs after the prompt is in the transcript, unfenced.
    { role: 'user', content: '[Mon 2026-12-07 01:00 UTC] m2 the prompt', timestamp: 3 },
  ];
  const t = fakeTranscript(entries, { pageSize: 10 });
  const engine = await createEngine({ gatewayUrl: url }, { loadRuntime: async () => t.module, cursors: memoryCursorStore() });
  requests.length = 0;
  await engine.assemble({ sessionId: 's1', sessionKey: 'agent:main:p', messages: [], tokenBudget: 1000, prompt: 'm2 the prompt' });
  const batches = requests.filter((r) => r.path === '/v1/engine/ingestBatch');
  assert.deepEqual(batches.flatMap((r) => r.body.messages), entries.slice(0, 2), 'the history, not the prompt');
  // The tool loop's next assemble: the prompt and what followed it are still the turn's.
  entries.push({ role: 'assistant', content: [{ type: 'toolCall', id: 'c1', name: 'x', arguments: {} }], timestamp: 4 });
  requests.length = 0;
  await engine.assemble({ sessionId: 's1', sessionKey: 'agent:main:p', messages: [], tokenBudget: 1000, prompt: 'm2 the prompt' });
  assert.deepEqual(requests.map((r) => r.path), ['/v1/engine/assemble'], 'nothing of the turn in progress is sent');
});

test('commitTurn: the history before the turn first, then the turn once, and the cursor kept in the state dir', async () => {
  const entries = [
    { role: 'user', content: 'answered on legacy', timestamp: 1 },
    { role: 'assistant', content: [{ type: 'text', text: 'legacy reply' }], timestamp: 2 },
    { role: 'user', content: 'm3 prompt', timestamp: 3 },
    { role: 'custom', customType: 'tool-search', content: '', timestamp: 4 },
    { role: 'assistant', content: [{ type: 'text', text: 'reply to m3' }], timestamp: 5 },
  ];
  const t = fakeTranscript(entries, { pageSize: 10 });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bridge-cursor-'));
  const env = { OPENCLAW_STATE_DIR: dir };
  const engine = await createEngine({ gatewayUrl: url }, { loadRuntime: async () => t.module, env });
  requests.length = 0;
  const params = {
    sessionId: 's2',
    sessionKey: 'agent:main:c',
    advancementKey: 'k1',
    admission: { entryId: 'e2' },
    terminal: { entryId: 'e4' },
    messages: entries.slice(2),
  };
  await engine.commitTurn(params);
  assert.deepEqual(requests.map((r) => r.path), ['/v1/engine/ingestBatch', '/v1/engine/commitTurn']);
  assert.deepEqual(requests[0].body.messages, entries.slice(0, 2), 'the history before the admitted entry');
  assert.deepEqual(requests[1].body.messages, [entries[2], entries[4]], 'the empty custom message is not stored');
  assert.ok(existsSync(path.join(dir, 'plugins', 'clawctx', 'transcript-cursors.json')));

  // The next turn's engine object (OpenClaw makes one per turn), even in a new process: nothing
  // to send, then only what was appended since.
  const next = await createEngine({ gatewayUrl: url }, { loadRuntime: async () => fakeTranscript(entries, { pageSize: 10 }).module, env });
  requests.length = 0;
  await next.bootstrap({ sessionId: 's2', sessionKey: 'agent:main:c', sessionFile: 'agent:main:c' });
  assert.deepEqual(requests.map((r) => r.path), ['/v1/engine/bootstrap'], 'the committed turn is not sent again');
  entries.push({ role: 'user', content: 'answered on legacy again', timestamp: 6 });
  requests.length = 0;
  await next.bootstrap({ sessionId: 's2', sessionKey: 'agent:main:c', sessionFile: 'agent:main:c' });
  assert.deepEqual(requests[0].body.messages, [entries[5]]);
  assert.equal(worthStoring({ role: 'custom', content: 'a note' }), true, 'a custom message with text is kept');
  assert.equal(worthStoring({ role: 'custom', content: [] }), false);
});

test('a cursor file that cannot be read counts as empty', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bridge-cursor-'));
  const store = fileCursorStore(path.join(dir, 'c.json'));
  assert.equal(await store.get('x'), undefined);
  await store.set('x', 'abc');
  assert.equal(await store.get('x'), 'abc');
  await import('node:fs/promises').then((f) => f.writeFile(path.join(dir, 'c.json'), '{not json'));
  assert.equal(await store.get('x'), undefined);
});

test('the recall tools are registered, declared in the manifest, and call the gateway for the calling session', async () => {
  const manifest = JSON.parse(readFileSync(new URL('../openclaw.plugin.json', import.meta.url), 'utf8'));
  assert.deepEqual(manifest.contracts.tools, ['lcm_grep', 'lcm_describe', 'lcm_expand']);
  const api = fakeApi({ gatewayUrl: url, token: TOKEN });
  register(api);
  assert.equal(api.tools.length, 1);
  assert.deepEqual(api.tools[0].opts.names, manifest.contracts.tools, 'registered = declared');
  const tools = api.tools[0].tool({ sessionKey: 'agent:main:invoice', sessionId: 'uuid-1' });
  assert.deepEqual(tools.map((t) => t.name), manifest.contracts.tools);
  for (const t of tools) {
    assert.equal(t.parameters.type, 'object', t.name);
    assert.ok(t.description.length > 20, t.name);
  }
  requests.length = 0;
  const r = await tools[0].execute('call-1', { query: 'Ferdinand', mode: 'any_term' });
  assert.deepEqual(requests[0], {
    method: 'POST',
    path: '/v1/engine/lcm_grep',
    auth: `Bearer ${TOKEN}`,
    body: { query: 'Ferdinand', mode: 'any_term', sessionKey: 'agent:main:invoice' },
  });
  assert.equal(r.content[0].type, 'text');
  assert.match(r.content[0].text, /Ferdinand/);
  assert.deepEqual(r.details, { hits: [{ id: 'msg_1', snippet: 'Ferdinand' }] });

  failWith = 503;
  try {
    const e = await tools[0].execute('call-2', { query: 'x' });
    assert.match(e.content[0].text, /^lcm_grep failed: .*HTTP 503/, 'a tool error the model can read, no throw');
  } finally {
    failWith = null;
  }
  assert.equal(RECALL_TOOLS.length, 3);
  const noSession = recallTools({ call: async () => assert.fail('no call without a session') }, {});
  assert.match((await noSession[0].execute('c', { query: 'x' })).content[0].text, /no session/);
});
