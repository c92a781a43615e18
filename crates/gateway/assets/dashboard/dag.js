// The summary DAG: layers by depth, the roots, children loaded when a node opens. A WAI-ARIA
// tree: one item is tabbable; arrows move, Right/Enter open, Left closes or goes to the parent.
import { get } from './api.js';
import { errorBox, fill, h, highlight, num, when } from './ui.js';

export function createDag(el, key, { openMessage }) {
  const layers = h('div', { class: 'layers', 'data-testid': 'dag-layers' });
  const tree = h('ul', { class: 'tree', role: 'tree', 'aria-label': 'Summary DAG', 'data-testid': 'dag-tree' });
  fill(
    el,
    h('h2', {}, 'Summary DAG'),
    h('p', { class: 'muted small' }, 'Roots first; open a node to load its children, down to the stored messages. Highlighted: the active frontier (what assembly draws from). Keys: ↑ ↓ move, → or Enter open, ← close.'),
    layers,
    tree,
  );
  const nodes = new Map();

  function label(n, terms) {
    const span = n.firstSeq === n.lastSeq ? `seq ${num(n.firstSeq)}` : `seq ${num(n.firstSeq)}–${num(n.lastSeq)}`;
    const time = n.fromTs ? `${when(n.fromTs)}${n.toTs && n.toTs !== n.fromTs ? ` – ${when(n.toTs)}` : ''}` : '';
    return h(
      'div',
      { class: 'node-label' },
      h('span', { class: 'twist', 'aria-hidden': 'true' }, n.kind === 'summary' ? '▸' : '·'),
      n.kind === 'summary' ? h('span', { class: `badge d${Math.min(n.depth, 3)}` }, `d${n.depth}`) : h('span', { class: `role role-${n.role}` }, n.role),
      h('code', {}, n.id),
      h('span', { class: 'muted small' }, span),
      n.kind === 'summary' ? h('span', { class: 'small' }, `${num(n.sourceTokens)} → ${num(n.tokens)} tok · ${num(n.childCount)} children`) : h('span', { class: 'small' }, `${num(n.tokens)} tok`),
      time ? h('span', { class: 'muted small time' }, time) : null,
      n.inFrontier ? h('span', { class: 'badge frontier' }, 'frontier') : null,
      h('div', { class: 'preview' }, highlight(n.preview ?? '', terms)),
    );
  }

  function item(n, level, terms) {
    const li = h('li', {
      role: 'treeitem',
      tabindex: '-1',
      'aria-level': String(level),
      'data-id': n.id,
      'data-kind': n.kind,
      'data-first-seq': n.firstSeq,
      'data-last-seq': n.lastSeq,
      class: `node ${n.inFrontier ? 'in-frontier' : ''}`,
    });
    if (n.kind === 'summary') li.setAttribute('aria-expanded', 'false');
    li.append(label(n, terms));
    li.addEventListener('click', (e) => {
      e.stopPropagation();
      focus(li);
      if (n.kind === 'summary') toggle(li);
      else openMessage(n.id);
    });
    nodes.set(n.id, li);
    return li;
  }

  async function expand(li, terms) {
    if (li.getAttribute('aria-expanded') === 'true') return;
    let group = li.querySelector(':scope > ul');
    if (!group) {
      li.setAttribute('aria-busy', 'true');
      try {
        const r = await get('/v1/dashboard/dag/children', { key, id: li.dataset.id });
        const level = Number(li.getAttribute('aria-level')) + 1;
        group = h('ul', { role: 'group' }, r.children.map((c) => item(c, level, terms)));
        li.append(group);
      } catch (e) {
        li.append(errorBox(e));
        return;
      } finally {
        li.removeAttribute('aria-busy');
      }
    }
    group.hidden = false;
    li.setAttribute('aria-expanded', 'true');
    li.querySelector(':scope > .node-label .twist').textContent = '▾';
  }

  function collapse(li) {
    const group = li.querySelector(':scope > ul');
    if (group) group.hidden = true;
    li.setAttribute('aria-expanded', 'false');
    li.querySelector(':scope > .node-label .twist').textContent = '▸';
  }

  function toggle(li) {
    if (li.getAttribute('aria-expanded') === 'true') collapse(li);
    else expand(li);
  }

  function focus(li) {
    for (const x of tree.querySelectorAll('[role="treeitem"][tabindex="0"]')) x.tabIndex = -1;
    li.tabIndex = 0;
    li.focus({ preventScroll: false });
  }

  function visible() {
    return [...tree.querySelectorAll('[role="treeitem"]')].filter((x) => x.offsetParent !== null);
  }

  tree.addEventListener('keydown', (e) => {
    const li = document.activeElement?.closest?.('[role="treeitem"]');
    if (!li || !tree.contains(li)) return;
    const items = visible();
    const i = items.indexOf(li);
    const expanded = li.getAttribute('aria-expanded');
    if (e.key === 'ArrowDown' && i < items.length - 1) focus(items[i + 1]);
    else if (e.key === 'ArrowUp' && i > 0) focus(items[i - 1]);
    else if (e.key === 'Home') focus(items[0]);
    else if (e.key === 'End') focus(items[items.length - 1]);
    else if (e.key === 'ArrowRight') {
      if (expanded === 'false') expand(li);
      else if (expanded === 'true') {
        const first = li.querySelector(':scope > ul > [role="treeitem"]');
        if (first) focus(first);
      }
    } else if (e.key === 'ArrowLeft') {
      if (expanded === 'true') collapse(li);
      else {
        const parent = li.parentElement?.closest('[role="treeitem"]');
        if (parent) focus(parent);
      }
    } else if (e.key === 'Enter' || e.key === ' ') {
      if (li.dataset.kind === 'summary') toggle(li);
      else openMessage(li.dataset.id);
    } else return;
    e.preventDefault();
  });

  async function load() {
    let d;
    try {
      d = await get('/v1/dashboard/dag', { key });
    } catch (e) {
      fill(tree, h('li', {}, errorBox(e)));
      return;
    }
    fill(
      layers,
      h(
        'table',
        { class: 'layer-table' },
        h('thead', {}, h('tr', {}, ['Depth', 'Summaries', 'Tokens', 'Covering', 'In frontier'].map((t) => h('th', { scope: 'col' }, t)))),
        h(
          'tbody',
          {},
          d.layers.map((l) => h('tr', { 'data-depth': l.depth }, h('td', {}, h('span', { class: `badge d${Math.min(l.depth, 3)}` }, `d${l.depth}`)), h('td', { class: 'n' }, num(l.count)), h('td', { class: 'n' }, num(l.tokens)), h('td', { class: 'n' }, num(l.sourceTokens)), h('td', { class: 'n' }, num(l.inFrontier)))),
          h('tr', { class: 'raw-row' }, h('td', {}, h('span', { class: 'badge frontier' }, 'raw')), h('td', { class: 'n' }, `${num(d.uncovered.count)} msgs`), h('td', { class: 'n' }, num(d.uncovered.tokens)), h('td', { class: 'n' }, d.uncovered.count ? `seq ${num(d.uncovered.firstSeq)}–${num(d.uncovered.lastSeq)}` : '–'), h('td', { class: 'n' }, '')),
        ),
      ),
    );
    nodes.clear();
    fill(tree, d.roots.length ? d.roots.map((n) => item(n, 1)) : h('li', { class: 'muted' }, 'No summaries yet: everything is raw.'));
    const first = tree.querySelector('[role="treeitem"]');
    if (first) first.tabIndex = 0;
  }

  /** Opens the path from a root down to `id` and marks it. */
  async function reveal(id, terms = []) {
    let path;
    try {
      path = (await get('/v1/dashboard/dag/path', { key, id })).path;
    } catch (e) {
      tree.prepend(h('li', {}, errorBox(e)));
      return;
    }
    for (const x of tree.querySelectorAll('.marked')) x.classList.remove('marked');
    for (const step of path.slice(0, -1)) {
      const li = nodes.get(step);
      if (!li) break;
      await expand(li, terms);
    }
    const target = nodes.get(path.at(-1));
    if (target) {
      target.classList.add('marked');
      const preview = target.querySelector(':scope > .node-label .preview');
      if (preview && terms.length) fill(preview, highlight(preview.textContent, terms));
      focus(target);
      target.scrollIntoView({ block: 'center' });
    }
  }

  return { load, reveal };
}
