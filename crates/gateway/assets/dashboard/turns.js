// A session's stored turns (the per-turn trace, issue #31): the list of turns, and one turn's
// context with what was left out and why, its warnings in words, and what changed since the
// turn before. Read from /v1/dashboard/trace/*, so it survives gateway restarts; the open
// turn is kept in the URL (`turn=N`).
import { get } from './api.js';
import { errorBox, fill, h, num, when } from './ui.js';

const KIND = { systemPromptAddition: 'system prompt addition', summary: 'summary', recalled: 'recalled block', raw: 'message' };

// Why the recalled block quotes a message: its search score and the prompt's terms it
// matched, or (no score) that it is the message after a quoted one: a question's answer, or
// what followed a hit when the block had room left.
function hitWords(hit) {
  if (hit.score === undefined) return `${hit.id} (the message after a quoted one)`;
  return `${hit.id} (score ${hit.score.toFixed(2)}, ${hit.matched} term${hit.matched === 1 ? '' : 's'} matched)`;
}

export function createTurns(panel, key, { onTurn, openItem }) {
  const list = h('div', { 'data-testid': 'turn-list' });
  const detail = h('div', { class: 'turn-detail', 'data-testid': 'turn-detail' });
  fill(panel, h('h2', {}, 'Turns'), h('p', { class: 'muted' }, 'What the model saw on each stored turn, and why. Kept in the gateway\'s state dir (gateway.trace), newest first.'), list, detail);
  let rows = [];
  let next = null;
  let open = null;

  async function loadList(more) {
    const page = await get('/v1/dashboard/trace/turns', { key, before: more ? next : undefined, limit: 50 });
    rows = more ? rows.concat(page.turns) : page.turns;
    next = page.nextBefore ?? null;
    renderList(page.total);
  }

  function renderList(total) {
    if (!rows.length) {
      fill(list, h('p', { class: 'muted', 'data-testid': 'turns-none' }, 'No stored turn for this session yet.'));
      return;
    }
    const table = h(
      'table',
      { class: 'turns' },
      h('caption', { class: 'muted' }, `${num(total)} stored turns`),
      h('thead', {}, h('tr', {}, ['Turn', 'When', 'Engine', 'Tokens / budget', 'Summaries', 'Recalled', 'Left out', 'Cached'].map((c) => h('th', { scope: 'col' }, c)))),
      h(
        'tbody',
        {},
        rows.map((r) =>
          h(
            'tr',
            { 'data-turn': r.turn, class: open === r.turn ? 'selected' : '' },
            h('td', { 'data-label': 'Turn' }, h('button', { type: 'button', class: 'linklike', 'data-testid': `turn-${r.turn}`, onclick: () => show(r.turn) }, `#${r.turn}`)),
            h('td', { 'data-label': 'When' }, when(r.atMs)),
            h('td', { 'data-label': 'Engine' }, r.engine, r.source === 'engine-api' ? h('span', { class: 'muted' }, ' (engine API)') : ''),
            h('td', { 'data-label': 'Tokens / budget', class: r.tokenBudget && r.tokens > r.tokenBudget ? 'over' : '' }, `${num(r.tokens)} / ${num(r.tokenBudget)}`),
            h('td', { 'data-label': 'Summaries' }, num(r.summaries)),
            h('td', { 'data-label': 'Recalled' }, num(r.recalled)),
            h('td', { 'data-label': 'Left out' }, num(r.leftOut)),
            h('td', { 'data-label': 'Cached' }, r.inputTokens ? `${num(r.cachedTokens ?? 0)} of ${num(r.inputTokens)}` : '–'),
          ),
        ),
      ),
    );
    fill(list, h('div', { class: 'scroll-x' }, table), next !== null ? h('button', { type: 'button', 'data-testid': 'turns-more', onclick: () => loadList(true).catch((e) => fill(list, errorBox(e))) }, 'Older turns') : '');
  }

  function ref(id) {
    if (!id) return '';
    return openItem ? h('button', { type: 'button', class: 'linklike', onclick: () => openItem(id) }, id) : h('code', {}, id);
  }

  async function show(turn) {
    open = turn;
    onTurn?.(turn);
    for (const tr of list.querySelectorAll('tr[data-turn]')) tr.classList.toggle('selected', Number(tr.dataset.turn) === turn);
    fill(detail, h('p', { class: 'muted' }, `Loading turn ${turn}…`));
    try {
      const [v, d] = await Promise.all([get('/v1/dashboard/trace/turn', { key, turn }), get('/v1/dashboard/trace/diff', { key, turn })]);
      renderTurn(v, d);
    } catch (e) {
      fill(detail, errorBox(e));
    }
  }

  function renderTurn(v, d) {
    const t = v;
    const m = t.model;
    const warnings = v.warnings?.length
      ? h('ul', { class: 'warnings', 'data-testid': 'turn-warnings' }, v.warnings.map((w) => h('li', {}, w)))
      : h('p', { class: 'muted', 'data-testid': 'turn-warnings' }, 'No warnings.');
    const parts = h(
      'ol',
      { class: 'parts', 'data-testid': 'turn-parts' },
      t.parts.map((p) =>
        h(
          'li',
          { 'data-kind': p.kind },
          h('span', { class: `swatch seg-${p.kind === 'summary' ? 'summary d0' : p.kind}` }),
          KIND[p.kind] ?? p.kind,
          ' ',
          ref(p.id),
          p.depth !== undefined ? ` depth ${p.depth}` : '',
          p.role ? h('span', { class: 'muted' }, ` ${p.role}`) : '',
          ` · ${num(p.tokens)} tokens`,
          p.hits?.length
            ? h('span', { class: 'muted', 'data-testid': 'recall-hits' }, ` · quotes ${p.hits.map(hitWords).join(', ')}`)
            : p.quotes?.length
              ? h('span', { class: 'muted' }, ` · quotes ${p.quotes.join(', ')}`)
              : '',
        ),
      ),
    );
    const lo = t.leftOut;
    const left = !lo
      ? h('p', { class: 'muted', 'data-testid': 'turn-left-out' }, 'Nothing is known about what was left out.')
      : !lo.known
        ? h('p', { class: 'muted', 'data-testid': 'turn-left-out' }, `Not known: ${lo.unknown ?? 'the engine did not say'}.`)
        : h(
            'div',
            { 'data-testid': 'turn-left-out' },
            h('p', {}, `${num(lo.items)} items left out (${num(lo.tokens)} tokens, ${num(lo.messages)} stored messages)`, lo.summarizedMessages ? `; ${num(lo.summarizedMessages)} messages reached the model only inside a summary` : '', '.'),
            lo.listed?.length
              ? h(
                  'ul',
                  { class: 'left-out' },
                  lo.listed.map((i) => h('li', {}, ref(i.id), ` · ${num(i.tokens)} tokens · `, h('span', { class: 'reason' }, i.reason))),
                )
              : '',
          );
    const items = (xs) => (xs?.length ? h('ul', {}, xs.map((i) => h('li', {}, KIND[i.kind] ?? i.kind, ' ', ref(i.reference), ` · ${num(i.tokens)} tokens`))) : h('p', { class: 'muted' }, 'none'));
    const diff = h(
      'section',
      { 'data-testid': 'turn-diff' },
      h('h3', {}, d.previous ? `Since turn ${d.previous}` : 'First stored turn'),
      d.words?.length ? h('ul', { class: 'diff-words' }, d.words.map((w) => h('li', {}, w))) : '',
      h('div', { class: 'diff-cols' }, h('div', {}, h('h4', {}, 'Came in'), items(d.cameIn)), h('div', {}, h('h4', {}, 'Went out'), items(d.wentOut)), h('div', {}, h('h4', {}, 'Summarized'), items(d.summarized))),
    );
    fill(
      detail,
      h('h3', { 'data-testid': 'turn-title' }, `Turn ${t.turn}`),
      h(
        'p',
        { class: 'figures' },
        `${when(t.atMs)} · served by `,
        h('strong', {}, t.engine.id),
        ` (${t.engine.reason}) · budget ${num(t.tokenBudget)} · sent ${num(t.gatewayTokens)} tokens by the gateway's count, ${num(t.engineEstimate)} by the engine's estimate`,
        m ? ` · model ${num(m.latencyMs)} ms, ${num(m.inputTokens)} in (${num(m.cachedTokens)} cached) / ${num(m.outputTokens)} out, ${m.outcome}` : '',
      ),
      warnings,
      h('h4', {}, 'Sent, in order'),
      parts,
      h('h4', {}, 'Left out'),
      left,
      t.compactions?.length ? [h('h4', {}, 'Compactions'), h('ul', {}, t.compactions.map((c) => h('li', {}, `${c.trigger} by ${c.by}: ${num(c.tokensBefore)} → ${num(c.tokensAfter)} tokens in ${num(Math.round(c.ms))} ms`)))] : '',
      t.summarizer?.length ? [h('h4', {}, 'Summarizer'), h('ul', {}, t.summarizer.map((s) => h('li', {}, `${s.summarizer}: ${num(s.ok)} ok, ${num(s.failed)} failed`)))] : '',
      diff,
    );
  }

  return {
    async load(turn) {
      try {
        await loadList(false);
        const want = turn ?? open;
        if (want) await show(Number(want));
      } catch (e) {
        fill(list, errorBox(e));
      }
    },
    show,
    // Brings the open turn into view: a link naming a turn (`turn=N`) must not open at the top
    // of the page when the turn is far down (a phone's narrow screen stacks everything).
    reveal() {
      if (open !== null) detail.scrollIntoView({ block: 'start' });
    },
  };
}
