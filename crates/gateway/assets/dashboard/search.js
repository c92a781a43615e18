// Recall search: lcm_grep in its modes over this session, lcm_expand on a hit, and a way to
// see the hit in the transcript or the DAG (highlighted there). Keyboard: ↑ ↓ move between
// hits, Enter expands, T shows in the transcript, D in the DAG. A search the user runs is
// told to the session (`onSearch`), which keeps it in the URL; `search` runs one named there.
import { post } from './api.js';
import { errorBox, fill, h, highlight, num, when } from './ui.js';

/** Words of a query worth highlighting. */
export function termsOf(query, mode) {
  if (mode === 'regex') return [query.replace(/[\\^$.*+?()[\]{}|]/g, ' ').trim()].filter((t) => t.length > 1).flatMap((t) => t.split(/\s+/));
  return query
    .replace(/["()*]/g, ' ')
    .split(/\s+/)
    .filter((w) => w && !['AND', 'OR', 'NOT', 'NEAR'].includes(w));
}

export function createSearch(el, key, { showInTranscript, showInDag, onSearch = () => {} }) {
  const query = h('input', { type: 'search', name: 'q', required: true, placeholder: 'Search this session\'s history', 'aria-label': 'Search query', 'data-testid': 'search-query' });
  const mode = h('select', { name: 'mode', 'aria-label': 'Mode', 'data-testid': 'search-mode' }, h('option', { value: 'full_text' }, 'All terms (full text)'), h('option', { value: 'any_term' }, 'Any term (question)'), h('option', { value: 'regex' }, 'Regular expression'));
  const target = h('select', { name: 'target', 'aria-label': 'Search in' }, h('option', { value: 'both' }, 'Messages and summaries'), h('option', { value: 'messages' }, 'Messages'), h('option', { value: 'summaries' }, 'Summaries'));
  const sort = h('select', { name: 'sort', 'aria-label': 'Order' }, h('option', { value: 'relevance' }, 'Best match'), h('option', { value: 'recency' }, 'Newest'));
  const button = h('button', { type: 'submit', 'data-testid': 'search-go' }, 'Search');
  const results = h('ol', { class: 'hits', 'aria-label': 'Search results', 'data-testid': 'search-results' });
  const info = h('p', { class: 'muted', role: 'status' });
  const more = h('button', { type: 'button', hidden: true, onclick: () => run(state.next) }, 'More results');
  const form = h('form', { class: 'search-form', role: 'search', onsubmit: (e) => (e.preventDefault(), submit()) }, query, mode, target, sort, button);
  const state = { next: null, terms: [] };
  fill(el, h('h2', {}, 'Recall search'), form, info, results, more);

  function submit() {
    const q = query.value.trim();
    if (!q) return;
    onSearch(q, mode.value);
    return run(0);
  }

  async function run(offset, focus = true) {
    const q = query.value.trim();
    if (!q) return;
    state.terms = termsOf(q, mode.value);
    info.textContent = 'Searching…';
    let r;
    try {
      r = await post('/v1/engine/lcm_grep', { sessionKey: key, query: q, mode: mode.value, target: target.value, sort: sort.value, limit: 20, offset });
    } catch (e) {
      info.textContent = '';
      fill(results, h('li', {}, errorBox(e)));
      return;
    }
    if (!offset) results.replaceChildren();
    for (const hit of r.hits) results.append(hitItem(hit));
    const shown = results.querySelectorAll('.hit').length;
    info.textContent = `${num(shown)} hit${shown === 1 ? '' : 's'}${r.scanTruncated ? ' (the regex scan stopped at its row limit)' : ''}${r.ftsQuery ? ` · query ${r.ftsQuery}` : ''}`;
    state.next = r.nextOffset ?? null;
    more.hidden = state.next === null;
    if (!offset && focus) results.querySelector('.hit')?.focus();
  }

  function hitItem(hit) {
    const expandBox = h('div', { class: 'expand', hidden: true });
    const li = h(
      'li',
      { class: 'hit', tabindex: '0', 'data-id': hit.id, 'aria-label': `${hit.id}, ${hit.role}` },
      h('div', { class: 'hit-head' }, h('code', {}, hit.id), h('span', { class: `role role-${hit.role}` }, hit.role === 'summary' ? `summary d${hit.depth}` : hit.role), hit.ts ? h('span', { class: 'muted small' }, when(hit.ts)) : null),
      h('div', { class: 'snippet' }, highlight(hit.snippet ?? '', state.terms)),
      h(
        'div',
        { class: 'hit-actions' },
        h('button', { type: 'button', 'data-action': 'expand', onclick: () => expand() }, 'Expand'),
        hit.id.startsWith('msg_') ? h('button', { type: 'button', 'data-action': 'transcript', onclick: () => showInTranscript(hit.id, state.terms) }, 'Show in transcript') : null,
        h('button', { type: 'button', 'data-action': 'dag', onclick: () => showInDag(hit.id, state.terms) }, 'Show in DAG'),
      ),
      expandBox,
    );
    async function expand() {
      if (!expandBox.hidden) {
        expandBox.hidden = true;
        return;
      }
      expandBox.hidden = false;
      fill(expandBox, h('p', { class: 'muted' }, 'Expanding…'));
      try {
        const r = await post('/v1/engine/lcm_expand', { sessionKey: key, id: hit.id });
        fill(
          expandBox,
          h('p', { class: 'muted small' }, `${num(r.items.length)} item(s), ${num(r.tokens)} tokens${r.omitted ? `, ${num(r.omitted)} left out by the cap` : ''}`),
          r.items.map((it) => h('div', { class: 'expanded-item', 'data-id': it.id }, h('div', { class: 'hit-head' }, h('code', {}, it.id), h('span', { class: `role role-${it.role}` }, it.role)), h('pre', {}, highlight(it.text, state.terms)))),
        );
      } catch (e) {
        fill(expandBox, errorBox(e));
      }
    }
    li.addEventListener('keydown', (e) => {
      if (e.target !== li) return;
      const all = [...results.querySelectorAll('.hit')];
      const i = all.indexOf(li);
      if (e.key === 'ArrowDown' && i < all.length - 1) all[i + 1].focus();
      else if (e.key === 'ArrowUp' && i > 0) all[i - 1].focus();
      else if (e.key === 'Enter') expand();
      else if (e.key === 't' && hit.id.startsWith('msg_')) showInTranscript(hit.id, state.terms);
      else if (e.key === 'd') showInDag(hit.id, state.terms);
      else return;
      e.preventDefault();
    });
    return li;
  }

  return {
    /** Runs `q` in `mode` (from the URL); `focus`: the first hit takes the focus. */
    search(q, m, { focus = true } = {}) {
      query.value = q;
      if ([...mode.options].some((o) => o.value === m)) mode.value = m;
      return run(0, focus);
    },
    /** Empties the query and the results (the URL names no search any more). */
    clear() {
      query.value = '';
      results.replaceChildren();
      info.textContent = '';
      more.hidden = true;
      state.next = null;
    },
    disable(message) {
      for (const x of form.elements) x.disabled = true;
      info.textContent = message;
    },
  };
}
