// Engines and plugins: the selection and why, registered engines, plugins, quarantines (this
// process and the persisted mirror), host requirements, the summarizer, the masked config.
import { get } from './api.js';
import { errorBox, fill, h, num, when } from './ui.js';

// The runtime settings' reason codes (contract §runtimeSettings), said in words.
const REASONS = {
  provider_timeout: 'the model provider timed out',
  provider_unavailable: 'the model provider is unavailable',
  rate_limited: 'the model provider is rate limiting',
  context_overflow: 'the context overflowed the model window',
  runtime_unavailable: 'the selected engine is unavailable (quarantined), so legacy answers',
  unknown: 'an unknown failure',
};

/** A reason code in words (anything else as given). */
function inWords(reason) {
  return REASONS[reason] ? `${REASONS[reason]} (${reason})` : reason;
}

function kv(rows) {
  return h('dl', { class: 'kv' }, rows.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '–')]));
}

export async function renderEngines(main) {
  fill(main, h('h1', {}, 'Engines & plugins'), h('p', { class: 'muted' }, 'Loading…'));
  let d;
  try {
    d = await get('/v1/dashboard/engines');
  } catch (e) {
    fill(main, h('h1', {}, 'Engines & plugins'), errorBox(e));
    return;
  }
  const info = d.engine.info;
  const sel = d.selection ?? {};
  const why = [
    `selected “${sel.selectedId ?? 'legacy (default)'}” from ${sel.source ?? 'default'}`,
    d.diagnostics?.fallbackReason ? `; fallback in effect: ${inWords(d.diagnostics.fallbackReason)}` : '',
    d.diagnostics?.degradedReason ? `; degraded: ${inWords(d.diagnostics.degradedReason)}` : '',
  ].join('');
  const reqs = info.hostRequirements ? Object.entries(info.hostRequirements) : [];
  const caps = new Set((d.host?.capabilities ?? []).map(String));
  const entries = d.plugins?.entries ? Object.entries(d.plugins.entries) : [];
  const summarizers = d.summarizer?.stored ?? [];
  fill(
    main,
    h('h1', {}, 'Engines & plugins'),
    h(
      'section',
      { class: 'card', 'data-testid': 'engine-card' },
      h('h2', {}, 'Engine in charge'),
      kv([
        ['Engine', h('strong', { 'data-testid': 'engine-id' }, `${info.name} (${info.id})`)],
        ['Why', why],
        ['Version', info.version],
        ['Owns compaction', info.ownsCompaction ? 'yes' : 'no'],
        ['Methods', d.engine.methods.join(', ')],
        ['Model', d.model],
        ['Summarizer', [d.summarizer?.host ?? 'none configured (the engine\'s own or extractive)', summarizers.length ? ` · stored summaries by ${summarizers.map(([n, c]) => `${n} (${num(c)})`).join(', ')}` : '', breakerWords(d.summarizer?.breaker)]],
      ]),
    ),
    h(
      'section',
      { class: 'card', 'data-testid': 'quarantines' },
      h('h2', {}, 'Quarantines'),
      d.quarantines.length
        ? h(
            'table',
            {},
            h('thead', {}, h('tr', {}, ['Engine', 'Operation', 'Reason', 'When', 'Where'].map((t) => h('th', { scope: 'col' }, t)))),
            h(
              'tbody',
              {},
              d.quarantines.map((q) =>
                h(
                  'tr',
                  { 'data-engine': q.engineId },
                  h('td', { 'data-label': 'Engine' }, h('code', {}, q.engineId), q.owner ? h('div', { class: 'muted small' }, q.owner) : null),
                  h('td', { 'data-label': 'Operation' }, q.operation),
                  h('td', { 'data-label': 'Reason', class: 'reason' }, q.reason),
                  h('td', { 'data-label': 'When' }, when(q.failedAt)),
                  h('td', { 'data-label': 'Where' }, q.source === 'mirror' ? `pid ${q.processId} (${q.processRunning ? 'running' : 'gone'}), from the mirror` : 'this gateway'),
                ),
              ),
            ),
          )
        : h('p', { class: 'muted' }, 'None.'),
      h('p', { class: 'muted small' }, 'Mirror: ', h('code', {}, d.quarantineMirror.path), d.quarantineMirror.error ? h('span', { class: 'error' }, ` (${d.quarantineMirror.error})`) : ''),
    ),
    h(
      'section',
      { class: 'card' },
      h('h2', {}, 'Registered engines'),
      h(
        'table',
        {},
        h('thead', {}, h('tr', {}, ['Engine', 'Owner', 'Lifecycle', 'State'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, d.registered.map((r) => h('tr', {}, h('td', { 'data-label': 'Engine' }, h('code', {}, r.id)), h('td', { 'data-label': 'Owner' }, r.owner ?? '–'), h('td', { 'data-label': 'Lifecycle' }, r.lifecycle ?? '–'), h('td', { 'data-label': 'State' }, r.quarantined ? h('span', { class: 'badge bad' }, 'quarantined') : r.id === info.id ? h('span', { class: 'badge frontier' }, 'in charge') : 'ready')))),
      ),
    ),
    h(
      'section',
      { class: 'card' },
      h('h2', {}, 'Plugins'),
      entries.length
        ? h('ul', { class: 'plain' }, entries.map(([id, e]) => h('li', {}, h('code', {}, id), e?.enabled === false ? ' (disabled)' : ' (enabled)', e?.config ? h('pre', { class: 'small' }, JSON.stringify(e.config, null, 2)) : null)))
        : h('p', { class: 'muted' }, 'No plugin entries in the config.'),
      d.plugins?.slots ? h('p', { class: 'small' }, 'Slots: ', h('code', {}, JSON.stringify(d.plugins.slots))) : null,
    ),
    h(
      'section',
      { class: 'card' },
      h('h2', {}, 'Host requirements'),
      h('p', { class: 'small muted' }, `Host ${d.host?.label ?? '?'} (${d.host?.id ?? '?'}) offers: ${[...caps].join(', ') || 'nothing'}`),
      reqs.length
        ? h('ul', { class: 'plain' }, reqs.map(([op, r]) => h('li', {}, h('code', {}, op), ': ', (r.requiredCapabilities ?? []).map((c) => h('span', { class: `badge ${caps.has(c) ? 'frontier' : 'bad'}` }, c)))))
        : h('p', { class: 'muted' }, 'The engine declares none.'),
    ),
    h('section', { class: 'card' }, h('h2', {}, 'Gateway'), kv(Object.entries(d.gateway).map(([k, v]) => [k, String(v)]))),
    h('section', { class: 'card' }, h('h2', {}, 'Config (secrets masked)'), h('pre', { class: 'config', 'data-testid': 'config' }, JSON.stringify(d.config, null, 2))),
  );
  document.body.dataset.ready = 'engines';
}

// The LLM summarizer's circuit breaker, when it is not closed: while open, compaction
// summarizes extractively, which the stored summaries' names alone do not tell.
function breakerWords(b) {
  if (!b) return '';
  const since = b.openedAtMs ? ` since ${new Date(b.openedAtMs).toLocaleString()}` : '';
  const state = b.state === 'open' ? 'open' : 'letting one probe call through';
  return h(
    'span',
    { class: 'error', 'data-testid': 'summarizer-breaker' },
    ` · circuit breaker ${state}${since} after ${num(b.consecutiveFailures)} failures in a row${b.lastError ? ` (last: ${b.lastError})` : ''}: compaction summarizes extractively meanwhile`,
  );
}
