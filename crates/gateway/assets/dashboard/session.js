// One session: the last assembled context, the stored turns (what the model saw on each, and
// why), the transcript, the summary DAG, the compaction timeline and recall search; live while a
// turn runs. What is open is in the URL, so a reload or a shared link shows it again: the tab,
// the open turn, the message the transcript is around, the DAG node in hand (`node=`) and the
// recall search (`q=`, `mode=`). Going somewhere (a search, a link to a message or a summary)
// is a history entry, so Back returns; moving within a view (tabs, the tree, pages) replaces
// the entry. The router hands a hash change within the same session to `update` rather than
// building the page again.
import { get } from './api.js';
import { createDag } from './dag.js';
import { createSearch, termsOf } from './search.js';
import { createTurns } from './turns.js';
import { ago, errorBox, fill, h, highlight, messageText, num, pageLink, stackedBar, when } from './ui.js';

const KIND_LABEL = { systemPromptAddition: 'System prompt addition', summary: 'Summaries', recalled: 'Recalled', raw: 'Raw tail' };

export async function renderSession(main, key, params) {
  const title = h('h1', { class: 'session-title' }, h('span', { class: 'muted' }, 'Session '), h('code', {}, key));
  const meta = h('p', { class: 'muted', 'data-testid': 'session-meta' }, 'Loading…');
  const context = h('section', { class: 'card', 'aria-labelledby': 'ctx-h', 'data-testid': 'context' });
  const panels = {
    turns: h('section', { class: 'panel', id: 'panel-turns', role: 'tabpanel', 'aria-labelledby': 'tab-turns', 'data-testid': 'turns' }),
    transcript: h('section', { class: 'panel', id: 'panel-transcript', role: 'tabpanel', 'aria-labelledby': 'tab-transcript', 'data-testid': 'transcript' }),
    dag: h('section', { class: 'panel', id: 'panel-dag', role: 'tabpanel', 'aria-labelledby': 'tab-dag', 'data-testid': 'dag' }),
    timeline: h('section', { class: 'panel', id: 'panel-timeline', role: 'tabpanel', 'aria-labelledby': 'tab-timeline', 'data-testid': 'timeline' }),
    search: h('section', { class: 'panel', id: 'panel-search', role: 'tabpanel', 'aria-labelledby': 'tab-search', 'data-testid': 'search' }),
  };
  const tabNames = { turns: 'Turns', transcript: 'Transcript', dag: 'Summary DAG', timeline: 'Compactions', search: 'Recall search' };
  const tabs = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Session views' });
  const tabButtons = {};
  for (const [id, label] of Object.entries(tabNames)) {
    tabButtons[id] = h('button', { type: 'button', role: 'tab', id: `tab-${id}`, 'aria-controls': `panel-${id}`, 'data-tab': id, onclick: () => select(id, true) }, label);
    tabs.append(tabButtons[id]);
  }
  tabs.addEventListener('keydown', (e) => {
    const ids = Object.keys(tabNames);
    const i = ids.indexOf(document.activeElement?.dataset?.tab);
    if (i < 0) return;
    let j = null;
    if (e.key === 'ArrowRight') j = (i + 1) % ids.length;
    if (e.key === 'ArrowLeft') j = (i - 1 + ids.length) % ids.length;
    if (e.key === 'Home') j = 0;
    if (e.key === 'End') j = ids.length - 1;
    if (j !== null) {
      e.preventDefault();
      select(ids[j], true);
    }
  });
  function select(id, focus) {
    if (!tabNames[id]) id = 'transcript';
    remember({ tab: id });
    for (const [k, b] of Object.entries(tabButtons)) {
      const on = k === id;
      b.setAttribute('aria-selected', String(on));
      b.tabIndex = on ? 0 : -1;
      panels[k].hidden = !on;
    }
    if (focus) tabButtons[id].focus();
  }

  const here = () => {
    const p = location.hash.replace(/^#/, '').split('/').filter(Boolean);
    try {
      return p[0] === 'session' && decodeURIComponent(p[1] ?? '') === key;
    } catch {
      return false;
    }
  };
  const hrefWith = (p) => `#/session/${encodeURIComponent(key)}/${p}`;
  // `state` goes into the URL (a null value drops its key): replacing the entry, or with
  // `push` adding one (where the user went, so Back comes back).
  function remember(state, push = false) {
    if (!here()) return; // a load that finishes after the user left must not bring them back
    for (const [k, v] of Object.entries(state)) {
      if (v === null || v === undefined) params.delete(k);
      else params.set(k, String(v));
    }
    if (push) history.pushState(null, '', hrefWith(params));
    else history.replaceState(null, '', hrefWith(params));
  }
  /** The URL that shows `id`: a message in the transcript, a summary in the DAG. */
  function hrefFor(id) {
    const p = new URLSearchParams(params);
    if (id.startsWith('msg_')) {
      p.set('tab', 'transcript');
      p.set('around', id);
    } else {
      p.set('tab', 'dag');
      p.set('node', id);
    }
    return hrefWith(p);
  }
  /** The search's words, for highlighting what it found wherever it is shown. */
  const searchTerms = () => (params.get('q') ? termsOf(params.get('q'), params.get('mode') || 'full_text') : []);
  /** Goes to `id` (a history entry): a stored message opens the transcript around it, marked
   * (unless `inDag`); anything else opens in the DAG with its path. */
  function openItem(id, terms = searchTerms(), inDag = false) {
    if (id.startsWith('msg_') && !inDag) {
      remember({ tab: 'transcript', around: id }, true);
      select('transcript', false);
      return transcript.load({ around: id, mark: id, terms });
    }
    remember({ tab: 'dag', node: id }, true);
    select('dag', false);
    return dag?.reveal(id, terms);
  }
  /** A link (a real one: keyboard, new tab) to `id` that opens it in place. */
  function itemLink(id, attrs = {}) {
    return pageLink(hrefFor(id), () => openItem(id), { 'data-item': id, ...attrs }, id);
  }

  fill(main, h('p', {}, h('a', { href: '#/' }, '← Sessions')), title, meta, context, tabs, ...Object.values(panels));
  select(params.get('tab') || 'transcript', false);

  let summary = null;
  // Compaction passes asked of the server: the newest page, more as the user asks (0: all).
  let timelineShown = TIMELINE_PAGE;
  // Paging away from the message the transcript was opened around forgets it.
  const transcript = createTranscript(panels.transcript, key, { onPage: () => remember({ around: null }) });
  const turns = createTurns(panels.turns, key, {
    onTurn: (n) => remember({ tab: 'turns', turn: n }),
    openItem: (id) => openItem(id, []),
  });
  let dag = null;
  const search = createSearch(panels.search, key, {
    showInTranscript: (id, terms) => openItem(id, terms),
    showInDag: (id, terms) => openItem(id, terms, true),
    onSearch: (q, mode) => remember({ tab: 'search', q, mode: mode === 'full_text' ? null : mode }, q !== params.get('q')),
  });

  async function loadSummary() {
    const [s, record] = await Promise.all([
      get('/v1/dashboard/session', { key, timelineLimit: timelineShown }),
      // The session's own record (the engines that served its stored turns, its last
      // assembly against its own budget); absent when tracing is off.
      get('/v1/dashboard/trace/session', { key }).catch(() => null),
    ]);
    summary = s;
    const st = summary.stats ?? {};
    const served = record?.engines?.length
      ? record.engines.map((e) => `${e.engine} (${e.firstTurn === e.lastTurn ? `turn ${e.firstTurn}` : `turns ${e.firstTurn}–${e.lastTurn}`})`).join(', ')
      : null;
    const last = record?.last;
    fill(
      meta,
      served
        ? h('span', { 'data-testid': 'session-engines' }, `Served by ${served} · this gateway runs ${summary.engine}`)
        : h('span', { 'data-testid': 'session-engines' }, summary.heldBy && summary.heldBy !== summary.engine ? `Held by ${summary.heldBy} · this gateway runs ${summary.engine}` : `Engine ${summary.engine}`),
      last?.tokenBudget
        ? h('span', { 'data-testid': 'session-usage' }, ` · last assembly ${num(last.tokens)} of its budget ${num(last.tokenBudget)} (${Math.round((100 * last.tokens) / last.tokenBudget)}%)`)
        : '',
      ` · ${num(st.messages)} messages stored · ${num(st.storedTokens)} tokens stored`,
      st.frontierTokens !== undefined ? ` · ${num(st.frontierTokens)} tokens in the active frontier` : '',
      ` · prompt budget ${num(summary.limits.promptBudget)}`,
      summary.cache?.hitRatio != null
        ? ` · prompt cache hit ratio ${(summary.cache.hitRatio * 100).toFixed(1)}% (${num(summary.cache.cachedTokens)} of ${num(summary.cache.promptTokens)} prompt tokens)`
        : '',
    );
    renderContext(context, summary, { itemLink });
    renderTimeline(panels.timeline, summary, itemLink, (n) => {
      timelineShown = n;
      return loadSummary();
    });
  }

  const started = performance.now();
  const around = params.get('around');
  const jobs = [loadSummary().catch((e) => fill(context, errorBox(e))), turns.load(params.get('turn')), transcript.load(around ? { around, mark: around, terms: searchTerms() } : {})];
  const overview = await jobs[0].then(() => summary);
  if (overview?.lossless) {
    dag = createDag(panels.dag, key, {
      openMessage: (id) => openItem(id, []),
      onNode: (id, push) => remember({ node: id }, push),
      hrefFor,
    });
    // The node and the search the URL names come back (a reload, a shared link).
    const node = params.get('node');
    jobs.push(dag.load().then(() => node && dag.reveal(node, searchTerms(), { focus: params.get('tab') === 'dag' })));
    if (params.get('q')) jobs.push(search.search(params.get('q'), params.get('mode') || 'full_text', { focus: params.get('tab') === 'search' }));
  } else {
    fill(panels.dag, h('p', { class: 'muted' }, 'The summary DAG is the lossless engine\'s; this gateway runs ', h('code', {}, overview?.engine ?? '?'), '.'));
    search.disable(`Recall search needs the lossless engine (this gateway runs ${overview?.engine ?? '?'}).`);
  }
  await Promise.all(jobs);
  // Once everything above it has its height: the turn the URL names, in view.
  if (params.get('tab') === 'turns' && params.get('turn')) turns.reveal();
  document.body.dataset.ready = 'session';
  document.body.dataset.loadMs = String(Math.round(performance.now() - started));

  // Live: a turn in this session updates the page as it runs.
  const status = document.getElementById('live-status');
  const events = new EventSource(`/v1/dashboard/events?key=${encodeURIComponent(key)}`);
  // Events of back-to-back turns come faster than a refresh: their kinds are gathered while
  // one refresh waits or runs, and the next refresh covers all of them (a `turnDone` followed
  // by the next turn's `assembled` must still reload the transcript and the DAG).
  let pending = null;
  let running = false;
  let kinds = new Set();
  const run = async () => {
    if (running) {
      pending = setTimeout(run, 150);
      return;
    }
    const what = kinds;
    kinds = new Set();
    running = true;
    try {
      await loadSummary();
      if ([...what].some((k) => k !== 'assembled')) {
        if (transcript.atEnd()) await transcript.load({});
        if (dag) {
          await dag.load();
          // The tree is new: the node in hand opens again, the focus left where it is.
          if (params.get('node')) await dag.reveal(params.get('node'), [], { focus: false });
        }
        await turns.load();
      }
    } catch (e) {
      status.textContent = `update failed: ${e.message}`;
    } finally {
      running = false;
    }
  };
  const refresh = (what) => {
    kinds.add(what);
    clearTimeout(pending);
    pending = setTimeout(run, 150);
  };
  events.onmessage = (m) => {
    let e;
    try {
      e = JSON.parse(m.data);
    } catch {
      return;
    }
    if (e.kind === 'hello') {
      status.textContent = 'live';
      status.dataset.state = 'connected';
      return;
    }
    if (e.kind === 'turnStarted') status.textContent = 'turn running…';
    if (e.kind === 'assembled') status.textContent = `assembled ${num(e.data?.totalTokens)} tokens`;
    if (e.kind === 'compaction') {
      status.textContent = 'compaction';
      status.dataset.event = 'compaction';
    }
    if (e.kind === 'turnDone') status.textContent = 'turn done';
    if (e.kind === 'lagged') status.textContent = 'reloading (missed updates)';
    document.body.dataset.lastEvent = e.kind;
    document.body.dataset.events = `${document.body.dataset.events ?? ''} ${e.kind}`.trim();
    refresh(e.kind);
  };
  events.onerror = () => {
    status.textContent = 'live: reconnecting';
    status.dataset.state = 'reconnecting';
  };
  // A hash change within this session (Back, Forward, a link): show what the URL names now.
  async function update(next) {
    const was = params;
    params = next;
    const tab = next.get('tab') || 'transcript';
    select(tab, false);
    const changed = (k) => (next.get(k) ?? null) !== (was.get(k) ?? null);
    if (changed('turn') && next.get('turn')) {
      await turns.load(next.get('turn'));
      if (tab === 'turns') turns.reveal();
    }
    if (changed('around') && next.get('around')) await transcript.load({ around: next.get('around'), mark: next.get('around'), terms: searchTerms() });
    if (dag && changed('node')) {
      if (next.get('node')) await dag.reveal(next.get('node'), searchTerms(), { focus: tab === 'dag' });
      else dag.unmark();
    }
    if (overview?.lossless && (changed('q') || changed('mode'))) {
      if (next.get('q')) await search.search(next.get('q'), next.get('mode') || 'full_text', { focus: tab === 'search' });
      else search.clear();
    }
  }
  const stop = () => {
    events.close();
    clearTimeout(pending);
    status.textContent = '';
    delete status.dataset.state;
    delete status.dataset.event;
    delete document.body.dataset.events;
    delete document.body.dataset.lastEvent;
  };
  stop.update = update;
  return stop;
}

function renderContext(el, s, { itemLink }) {
  const last = s.lastAssembled;
  const heading = h('h2', { id: 'ctx-h' }, 'Last assembled context');
  if (!last) {
    fill(el, heading, h('p', { class: 'muted', 'data-testid': 'ctx-none' }, 'Nothing assembled since the gateway started: the next turn (or POST /v1/engine/assemble) records it.'));
    return;
  }
  const b = last.breakdown;
  const budget = last.tokenBudget ?? s.limits.promptBudget;
  const segs = [];
  for (const p of b.parts) {
    const kind = p.kind === 'summary' ? `summary d${Math.min(p.depth ?? 0, 3)}` : p.kind;
    segs.push({ kind, tokens: p.tokens, label: p.kind === 'summary' ? `${p.id} (depth ${p.depth})` : KIND_LABEL[p.kind] });
  }
  const t = b.totals;
  const legend = h(
    'ul',
    { class: 'legend' },
    [
      ['systemPromptAddition', t.systemPromptAddition, null],
      ['summary', t.summaries, t.summaryCount],
      ['recalled', t.recalled, t.recalledCount],
      ['raw', t.raw, t.rawCount],
    ].map(([k, tokens, n]) =>
      h('li', { 'data-kind': k }, h('span', { class: `swatch seg-${k === 'summary' ? 'summary d0' : k}` }), `${KIND_LABEL[k]}: `, h('strong', { 'data-testid': `ctx-${k}-tokens` }, num(tokens)), n !== null ? ` (${num(n)})` : ''),
    ),
  );
  const left = s.leftOut;
  fill(
    el,
    heading,
    h(
      'p',
      { class: 'figures' },
      h('strong', { 'data-testid': 'ctx-total' }, num(b.totalTokens)),
      ' of ',
      h('strong', { 'data-testid': 'ctx-budget' }, num(budget)),
      ' tokens · engine estimate ',
      h('strong', { 'data-testid': 'ctx-estimated' }, num(b.estimatedTokens)),
      ' · ',
      h('strong', { 'data-testid': 'ctx-messages' }, num(b.messageCount)),
      ' messages · ',
      h('span', { class: 'muted' }, `${last.source === 'turn' ? 'from a turn' : 'from the engine API'}, ${ago(last.at)}; ${num(last.historyMessages)} stored messages given`),
    ),
    stackedBar(segs, budget, { label: `Assembled context: ${num(b.totalTokens)} of ${num(budget)} tokens` }),
    legend,
    left
      ? h(
          'p',
          { class: 'left-out', 'data-testid': 'ctx-left-out' },
          left.stale
            ? `The store was compacted after this assembly (epoch ${left.epochThen} → ${left.epochNow}), so what it left out of the frontier is not known any more; the next assembly shows it.`
            : left.items !== undefined
            ? [
                'Left out: ',
                h('strong', {}, num(left.items)),
                ` frontier item(s), ${num(left.tokens)} tokens, standing for ${num(left.messages)} stored message(s)`,
                left.firstSeq !== null && left.firstSeq !== undefined ? ` (seq ${num(left.firstSeq)}–${num(left.lastSeq)})` : '',
                left.listed?.length ? [': ', left.listed.slice(0, 12).map((i, n) => [n ? ', ' : '', itemLink(i.id)]), left.items > 12 ? ', …' : ''] : '',
              ]
            : ['Stored messages not in the assembled context: ', h('strong', {}, num(left.messages))],
        )
      : null,
    h(
      'details',
      { class: 'parts' },
      h('summary', {}, `The ${b.parts.length} parts in order`),
      h(
        'ol',
        { class: 'part-list', 'data-testid': 'ctx-parts' },
        b.parts.map((p) =>
          h(
            'li',
            { class: `part part-${p.kind}`, 'data-kind': p.kind },
            h('span', { class: `swatch seg-${p.kind === 'summary' ? `summary d${Math.min(p.depth ?? 0, 3)}` : p.kind}` }),
            h('span', { class: 'part-kind' }, p.kind === 'summary' ? [itemLink(p.id), ` depth ${p.depth}`] : p.kind === 'raw' ? p.role : KIND_LABEL[p.kind]),
            h('span', { class: 'n' }, `${num(p.tokens)} tok`),
            h('span', { class: 'preview' }, p.preview),
          ),
        ),
      ),
    ),
  );
}

// Compaction passes a page of the timeline shows.
const TIMELINE_PAGE = 100;

// `showMore(n)` reloads with the newest `n` passes (0: all of them).
function renderTimeline(el, s, itemLink, showMore) {
  const rows = s.timeline ?? [];
  if (!rows.length) {
    fill(el, h('h2', {}, 'Compactions'), h('p', { class: 'muted' }, 'No compaction yet.'));
    return;
  }
  const total = s.timelineTotal ?? rows.length;
  const more =
    total > rows.length
      ? h(
          'p',
          { class: 'muted', 'data-testid': 'timeline-more' },
          `The newest ${num(rows.length)} of ${num(total)} compaction passes. `,
          h(
            'button',
            { type: 'button', 'data-testid': 'timeline-older', onclick: () => showMore(rows.length + TIMELINE_PAGE >= total ? 0 : rows.length + TIMELINE_PAGE).catch((e) => fill(el, errorBox(e))) },
            `Show ${num(Math.min(TIMELINE_PAGE, total - rows.length))} older`,
          ),
          ' ',
          h('button', { type: 'button', 'data-testid': 'timeline-all', onclick: () => showMore(0).catch((e) => fill(el, errorBox(e))) }, `Show all ${num(total)}`),
        )
      : '';
  // Bars are shares of the largest figure before or after, so none runs off the card.
  const max = Math.max(...rows.map((r) => Math.max(r.tokensBefore ?? 0, r.tokensAfter ?? 0)), 1);
  fill(
    el,
    h('h2', {}, 'Compactions'),
    more,
    h(
      'ol',
      { class: 'timeline', 'data-testid': 'timeline-list' },
      rows
        .slice()
        .reverse()
        .map((r) =>
          h(
            'li',
            {},
            h('time', { datetime: new Date(r.at).toISOString() }, when(r.at)),
            h('span', { class: `badge ${r.kind}` }, r.depth === null || r.depth === undefined ? r.kind : `${r.kind} → depth ${r.depth}`),
            h('span', {}, r.firstSeq === null || r.firstSeq === undefined ? 'summary of the transcript before it' : `${num(r.summaries)} summar${r.summaries === 1 ? 'y' : 'ies'} of seq ${num(r.firstSeq)}–${num(r.lastSeq)}`),
            h('span', { class: 'tokens' }, `${num(r.tokensBefore)} → ${num(r.tokensAfter)} tokens`),
            h('span', { class: 'muted' }, r.summarizer),
            h('span', { class: 'mini' }, h('span', { class: 'mini-before', style: { width: `${(100 * r.tokensBefore) / max}%` } }), h('span', { class: 'mini-after', style: { width: `${(100 * r.tokensAfter) / max}%` } })),
            // What the pass wrote, each a link into the DAG (the server lists the first few dozen).
            r.summaryIds?.length
              ? h(
                  'span',
                  { class: 'pass-summaries small', 'data-testid': 'pass-summaries' },
                  'Wrote ',
                  r.summaryIds.map((id, n) => [n ? ', ' : '', itemLink(id)]),
                  r.summaries > r.summaryIds.length ? ` and ${num(r.summaries - r.summaryIds.length)} more` : '',
                )
              : null,
          ),
        ),
    ),
  );
}

/** The paged transcript with tool calls and results folded; a message opened with search
 * terms has the folds that hold them opened, the first match scrolled into view. */
function createTranscript(el, key, { onPage }) {
  let page = null;
  const list = h('div', { class: 'messages', 'data-testid': 'messages' });
  const info = h('span', { class: 'muted' });
  const jump = h('input', { type: 'number', min: '0', placeholder: 'seq', 'aria-label': 'Jump to message sequence', class: 'jump' });
  const nav = h(
    'div',
    { class: 'toolbar' },
    h('button', { type: 'button', onclick: () => page && turn({ from: 0 }) }, '⇤ First'),
    h('button', { type: 'button', 'data-testid': 'older', onclick: () => page && turn({ from: Math.max(0, page.fromSeq - page.limit) }) }, '← Older'),
    h('button', { type: 'button', 'data-testid': 'newer', onclick: () => page?.nextSeq != null && turn({ from: page.nextSeq }) }, 'Newer →'),
    h('button', { type: 'button', onclick: () => turn({}) }, 'Latest ⇥'),
    h('form', { class: 'inline', onsubmit: (e) => (e.preventDefault(), jump.value !== '' && turn({ from: Number(jump.value) })) }, jump, h('button', { type: 'submit' }, 'Go')),
    info,
  );
  fill(el, h('h2', {}, 'Transcript'), nav, list);
  const turn = (at) => (onPage(), load(at));

  async function load({ from, around, mark, terms } = {}) {
    try {
      page = await get('/v1/dashboard/transcript', { key, from, around, limit: 100 });
    } catch (e) {
      fill(list, errorBox(e));
      return;
    }
    const last = page.messages.at(-1);
    info.textContent = page.messages.length ? `seq ${num(page.fromSeq)}–${num(last.seq)} of ${num(page.total)}` : `${num(page.total)} messages`;
    fill(list, page.messages.map((m) => renderMessage(m, terms)));
    if (mark) {
      const target = list.querySelector(`[data-id="${CSS.escape(mark)}"]`);
      if (target) {
        target.classList.add('marked');
        // A match inside a folded tool call, tool result or thinking: open that fold.
        for (const d of target.querySelectorAll('details')) if (d.querySelector('mark')) d.open = true;
        (target.querySelector('mark') ?? target).scrollIntoView({ block: 'center' });
        target.focus({ preventScroll: true });
      }
    }
  }
  return { load, atEnd: () => !page || page.nextSeq == null };
}

function renderMessage(m, terms) {
  const msg = m.message ?? {};
  const role = msg.role ?? '?';
  const head = h(
    'header',
    {},
    h('span', { class: `role role-${role}` }, role === 'toolResult' ? `tool result${msg.toolName ? ` · ${msg.toolName}` : ''}` : role),
    h('span', { class: 'muted small' }, `#${num(m.seq)} · ${m.id} · ${num(m.tokens)} tok${msg.timestamp ? ` · ${when(msg.timestamp)}` : ''}`),
    m.inFrontier ? h('span', { class: 'badge frontier', title: 'raw in the active frontier' }, 'raw') : m.parent ? h('span', { class: 'badge', title: 'summarized' }, `in ${m.parent}`) : null,
  );
  const body = h('div', { class: 'body' });
  if (role === 'toolResult') {
    const text = messageText(msg);
    body.append(h('details', { class: 'fold' }, h('summary', {}, `${msg.isError ? 'error · ' : ''}${num(text.length)} characters`), h('pre', {}, highlight(text, terms))));
  } else if (typeof msg.content === 'string') {
    body.append(h('div', { class: 'text' }, highlight(msg.content, terms)));
  } else {
    for (const b of msg.content ?? []) {
      if (b.type === 'text') body.append(h('div', { class: 'text' }, highlight(b.text ?? '', terms)));
      else if (b.type === 'toolCall') body.append(h('details', { class: 'fold tool-call' }, h('summary', {}, 'tool call · ', highlight(b.name ?? '', terms)), h('pre', {}, highlight(JSON.stringify(b.arguments ?? {}, null, 2), terms))));
      else if (b.type === 'thinking') body.append(h('details', { class: 'fold' }, h('summary', {}, 'thinking'), h('pre', {}, highlight(b.thinking ?? '', terms))));
      else body.append(h('div', { class: 'muted' }, `[${b.type}]`));
    }
  }
  return h('article', { class: `msg msg-${role}`, 'data-id': m.id, 'data-seq': m.seq, tabindex: '-1' }, head, body);
}
