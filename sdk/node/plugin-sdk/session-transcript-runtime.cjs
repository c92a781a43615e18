// clawctx implementation of "openclaw/plugin-sdk/session-transcript-runtime": the session
// transcript, read by session identity, as OpenClaw 2026.8+ offers it to plugins (its
// transcripts are in SQLite, so `sessionFile` is no path and plugins read history through
// this module). Backed by clawctx's transcript: each read is a `host/transcript.*` request to
// the host, served for the session of the engine call in progress (the runner finds that call
// from the identity given, see runner.mjs `transcriptRead`). A read outside an engine call of
// that session is refused with an error naming why.
'use strict';

const MODULE = 'openclaw/plugin-sdk/session-transcript-runtime';

function runner() {
  const r = globalThis[Symbol.for('clawctx.runner')];
  if (!r || typeof r.transcriptRead !== 'function') {
    throw new Error(`${MODULE} needs the clawctx plugin runner (it was loaded outside one)`);
  }
  return r;
}

/**
 * One bounded page of the visible messages of a session's active branch after `cursor`
 * (absent: from the start): `{kind: "page", cursor, entries: [{entryId, parentId, seq,
 * message, role, createdAt?}], hasMore, serializedBytes}`; `{kind: "reset", cursor, reason}`
 * when the cursor no longer fits (read again from that cursor); `{kind: "missing"}` without a
 * transcript. Params: `sessionId`, `sessionKey`, `agentId`, `cursor`, `maxMessages` (1 to
 * 10,000, default 1,000), `maxBytes`. Throws past the turn in progress, as OpenClaw does.
 */
async function readSessionTranscriptVisibleMessageDelta(params) {
  const p = params && typeof params === 'object' ? params : {};
  const request = {};
  for (const k of ['sessionId', 'sessionKey', 'agentId', 'cursor', 'start']) {
    if (typeof p[k] === 'string') request[k] = p[k];
  }
  for (const k of ['maxMessages', 'maxBytes']) {
    if (p[k] !== undefined) {
      if (!Number.isInteger(p[k])) throw new RangeError(`${k} must be an integer`);
      request[k] = p[k];
    }
  }
  return runner().transcriptRead('host/transcript.readVisibleMessageDelta', request);
}

/** Every visible message entry of the session's active branch (pages of the delta read). */
async function readVisibleSessionTranscriptMessageEntries(params) {
  const out = [];
  let cursor;
  for (let guard = 0; guard < 10000; guard++) {
    const r = await readSessionTranscriptVisibleMessageDelta({ ...params, cursor, maxMessages: 10000 });
    if (!r || r.kind === 'missing') return out;
    if (r.kind === 'reset') {
      out.length = 0;
      cursor = r.cursor;
      continue;
    }
    out.push(...r.entries);
    cursor = r.cursor;
    if (!r.hasMore) return out;
  }
  return out;
}

function assistantText(message) {
  const c = message && message.content;
  if (typeof c === 'string') return c;
  if (!Array.isArray(c)) return undefined;
  const text = c.filter((b) => b && b.type === 'text' && typeof b.text === 'string').map((b) => b.text).join('');
  return text === '' ? undefined : text;
}

/** The text of the session's latest assistant message (undefined when none). */
async function readLatestAssistantTextByIdentity(params) {
  const entries = await readVisibleSessionTranscriptMessageEntries(params);
  for (let i = entries.length - 1; i >= 0; i--) {
    if (entries[i].role === 'assistant') {
      const t = assistantText(entries[i].message);
      if (t !== undefined) return t;
    }
  }
  return undefined;
}

// OpenClaw's other exports of this module are present, so a plugin that imports them loads;
// a call says that clawctx does not offer it.
function notSupported(name) {
  return function unsupported() {
    throw new Error(`${name}() of ${MODULE} is not supported by clawctx`);
  };
}

exports.readSessionTranscriptVisibleMessageDelta = readSessionTranscriptVisibleMessageDelta;
exports.readVisibleSessionTranscriptMessageEntries = readVisibleSessionTranscriptMessageEntries;
exports.readLatestAssistantTextByIdentity = readLatestAssistantTextByIdentity;
exports.appendAssistantMirrorMessageByIdentity = notSupported('appendAssistantMirrorMessageByIdentity');
exports.appendSessionTranscriptMessageByIdentity = notSupported('appendSessionTranscriptMessageByIdentity');
exports.appendSessionTranscriptMessageByIdentityStrict = notSupported('appendSessionTranscriptMessageByIdentityStrict');
exports.appendSessionTranscriptMessagesByIdentity = notSupported('appendSessionTranscriptMessagesByIdentity');
exports.appendSessionYieldContext = notSupported('appendSessionYieldContext');
exports.createSessionCatalogGitHubLinker = notSupported('createSessionCatalogGitHubLinker');
exports.createSessionCatalogSourceActorProjector = notSupported('createSessionCatalogSourceActorProjector');
exports.formatSessionTranscriptMemoryHitKey = notSupported('formatSessionTranscriptMemoryHitKey');
exports.hasPromptImageInput = notSupported('hasPromptImageInput');
exports.parseSessionTranscriptMemoryHitKey = notSupported('parseSessionTranscriptMemoryHitKey');
exports.publishSessionTranscriptUpdateByIdentity = notSupported('publishSessionTranscriptUpdateByIdentity');
exports.readSessionTranscriptCatalogPage = notSupported('readSessionTranscriptCatalogPage');
exports.readSessionTranscriptCatalogTitle = notSupported('readSessionTranscriptCatalogTitle');
exports.readSessionTranscriptEvents = notSupported('readSessionTranscriptEvents');
exports.readSessionTranscriptRawDelta = notSupported('readSessionTranscriptRawDelta');
exports.resolveSessionTranscriptIdentity = notSupported('resolveSessionTranscriptIdentity');
exports.resolveSessionTranscriptMemoryHitKeyToSessionKeys = notSupported('resolveSessionTranscriptMemoryHitKeyToSessionKeys');
exports.resolveSessionTranscriptTarget = notSupported('resolveSessionTranscriptTarget');
exports.withSessionTranscriptWriteLock = notSupported('withSessionTranscriptWriteLock');
