// Sessions: every session with its counts, a usage bar against the budget, filter and sort.
import { get } from './api.js';
import { ago, errorBox, fill, h, num, stackedBar } from './ui.js';

const SORTS = {
  lastActivity: { label: 'Last activity', key: (s) => s.lastActivity ?? 0, desc: true },
  messages: { label: 'Messages', key: (s) => s.messages ?? 0, desc: true },
  storedTokens: { label: 'Stored tokens', key: (s) => s.storedTokens ?? 0, desc: true },
  assembledTokens: { label: 'Assembled tokens', key: (s) => s.assembledTokens ?? 0, desc: true },
  compactions: { label: 'Compactions', key: (s) => s.compactions ?? 0, desc: true },
  sessionKey: { label: 'Session key', key: (s) => s.sessionKey, desc: false },
};

export async function renderSessions(main) {
  fill(main, h('h1', {}, 'Sessions'), h('p', { class: 'muted' }, 'Loading…'));
  let data;
  try {
    data = await get('/v1/dashboard/sessions');
  } catch (e) {
    fill(main, h('h1', {}, 'Sessions'), errorBox(e));
    return;
  }
  const state = { filter: '', sort: 'lastActivity' };
  const list = h('div', { class: 'session-list', 'data-testid': 'session-list' });
  const count = h('span', { class: 'muted' });
  const filter = h('input', {
    type: 'search',
    placeholder: 'Filter by key, id or engine',
    'aria-label': 'Filter sessions',
    'data-testid': 'session-filter',
    oninput: (e) => {
      state.filter = e.target.value.trim().toLowerCase();
      draw();
    },
  });
  const sort = h(
    'select',
    { 'aria-label': 'Sort sessions', 'data-testid': 'session-sort', onchange: (e) => ((state.sort = e.target.value), draw()) },
    Object.entries(SORTS).map(([k, v]) => h('option', { value: k }, v.label)),
  );

  function draw() {
    const s = SORTS[state.sort];
    const rows = data.sessions
      .filter((r) => !state.filter || [r.sessionKey, r.sessionId, r.engine].some((x) => (x ?? '').toLowerCase().includes(state.filter)))
      .sort((a, b) => {
        const x = s.key(a);
        const y = s.key(b);
        const c = x < y ? -1 : x > y ? 1 : 0;
        return s.desc ? -c : c;
      });
    count.textContent = `${rows.length} of ${data.sessions.length}`;
    if (!rows.length) {
      fill(list, h('p', { class: 'muted' }, data.sessions.length ? 'No session matches the filter.' : 'No sessions yet: run a turn through /v1/chat/completions or the engine API.'));
      return;
    }
    fill(
      list,
      h(
        'table',
        { class: 'sessions' },
        h(
          'thead',
          {},
          h('tr', {}, ['Session', 'Engine', 'Messages', 'Stored', 'Assembled', 'Context usage', 'Last activity', 'Compactions'].map((t) => h('th', { scope: 'col' }, t))),
        ),
        h(
          'tbody',
          {},
          rows.map((r) => {
            const budget = r.assembledBudget ?? r.budget;
            const used = r.assembledTokens ?? r.contextTokens ?? 0;
            return h(
              'tr',
              { 'data-session-key': r.sessionKey },
              h('td', { 'data-label': 'Session' }, h('a', { href: `#/session/${encodeURIComponent(r.sessionKey)}` }, r.sessionKey), r.sessionId ? h('div', { class: 'muted small' }, r.sessionId) : null),
              h('td', { 'data-label': 'Engine' }, r.engine),
              h('td', { 'data-label': 'Messages', class: 'n' }, num(r.messages)),
              h('td', { 'data-label': 'Stored', class: 'n' }, num(r.storedTokens)),
              h('td', { 'data-label': 'Assembled', class: 'n' }, r.assembledTokens === undefined ? '–' : num(r.assembledTokens)),
              h(
                'td',
                { 'data-label': 'Context usage', class: 'usage' },
                // Usage is the session's own last assembly against its own budget; without one
                // (none since the gateway started) the stored frontier is not a usage of
                // today's budget, so it is shown as a size, not a percentage.
                r.assembledTokens === undefined
                  ? h('span', { class: 'small muted' }, `no assembly recorded · frontier ${num(used)} tokens`)
                  : [
                      stackedBar([{ kind: 'raw', tokens: used, label: 'Assembled' }], budget, { small: true, label: `${num(used)} of ${num(budget)} tokens` }),
                      h('span', { class: 'small muted' }, `${budget ? Math.round((100 * used) / budget) : 0}% of ${num(budget)}`),
                    ],
              ),
              h('td', { 'data-label': 'Last activity' }, ago(r.lastActivity)),
              h('td', { 'data-label': 'Compactions', class: 'n' }, num(r.compactions)),
            );
          }),
        ),
      ),
    );
  }

  fill(
    main,
    h('h1', {}, 'Sessions'),
    h('p', { class: 'muted' }, `Engine ${data.engine} · prompt budget ${num(data.budget)} tokens`),
    h('div', { class: 'toolbar' }, filter, h('label', {}, 'Sort ', sort), count),
    list,
  );
  draw();
  document.body.dataset.ready = 'sessions';
}
