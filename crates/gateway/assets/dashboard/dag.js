// The summary DAG: layers by depth, the roots, children loaded when a node opens. A WAI-ARIA
// tree: one item is tabbable; arrows move, Right/Enter open, Left closes or goes to the parent.
// A long session's DAG is deeper than a phone is wide (each level indents), so the node in hand
// also gets its path as a breadcrumb, root first, each crumb a link back up to that node; the
// session keeps that node in the URL (`node=`), and a link or reload opens its path again.
import { get } from './api.js';
import { errorBox, fill, h, highlight, num, pageLink, when } from './ui.js';

const COLUMNS = ['Depth', 'Summaries', 'Tokens', 'Covering', 'In frontier'];

/** `onNode(id, push)`: the node in hand changed (push: a navigation, worth a history entry);
 * `hrefFor(id)`: the URL that opens a node. */
export function createDag(el, key, { openMessage, onNode = () => {}, hrefFor = () => '#' }) {
  const layers = h('div', { class: 'layers', 'data-testid': 'dag-layers' });
  const tree = h('ul', { class: 'tree', role: 'tree', 'aria-label': 'Summary DAG', 'data-testid': 'dag-tree' });
  const crumbs = h('nav', { class: 'crumbs', 'aria-label': 'Path to the node in hand', 'data-testid': 'dag-crumbs', hidden: true });
  fill(
    el,
    h('h2', {}, 'Summary DAG'),
    h('p', { class: 'muted small' }, 'Roots first; open a node to load its children, down to the stored messages. Highlighted: the active frontier (what assembly draws from). Keys: ↑ ↓ move, → or Enter open, ← close.'),
    layers,
    crumbs,
    tree,
  );
  const nodes = new Map();
  let current = null;

  /** The path from a root down to `li` as crumbs (the DOM holds it: each level is nested). */
  function showPath(li) {
    const chain = [];
    for (let x = li; x && tree.contains(x); x = x.parentElement?.closest('[role="treeitem"]')) chain.unshift(x);
    crumbs.hidden = !chain.length;
    fill(
      crumbs,
      h(
        'ol',
        {},
        chain.map((x, i) => {
          const last = i === chain.length - 1;
          const depth = x.dataset.depth;
          return h(
            'li',
            {},
            pageLink(
              hrefFor(x.dataset.id),
              () => {
                onNode(x.dataset.id, true);
                reveal(x.dataset.id);
              },
              { 'data-id': x.dataset.id, 'aria-current': last ? 'location' : null },
              depth !== undefined ? h('span', { class: `badge d${Math.min(Number(depth), 3)}` }, `d${depth}`) : null,
              ' ',
              x.dataset.id,
            ),
          );
        }),
      ),
    );
  }

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
      'data-depth': n.depth ?? null,
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

  /** Moves the tree's one tab stop (and the focus, unless `quiet`) to `li`: the node in hand. */
  function focus(li, quiet = false) {
    for (const x of tree.querySelectorAll('[role="treeitem"][tabindex="0"]')) x.tabIndex = -1;
    li.tabIndex = 0;
    if (!quiet) li.focus({ preventScroll: false });
    if (current !== li) {
      current = li;
      showPath(li);
      onNode(li.dataset.id, false);
    }
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
        h('thead', {}, h('tr', {}, COLUMNS.map((t) => h('th', { scope: 'col' }, t)))),
        h(
          'tbody',
          {},
          d.layers.map((l) => row({ 'data-depth': l.depth }, h('span', { class: `badge d${Math.min(l.depth, 3)}` }, `d${l.depth}`), num(l.count), num(l.tokens), num(l.sourceTokens), num(l.inFrontier))),
          row({ class: 'raw-row' }, h('span', { class: 'badge frontier' }, 'raw'), `${num(d.uncovered.count)} msgs`, num(d.uncovered.tokens), d.uncovered.count ? `seq ${num(d.uncovered.firstSeq)}–${num(d.uncovered.lastSeq)}` : '–', ''),
        ),
      ),
    );
    nodes.clear();
    unmark();
    fill(tree, d.roots.length ? d.roots.map((n) => item(n, 1)) : h('li', { class: 'muted' }, 'No summaries yet: everything is raw.'));
    const first = tree.querySelector('[role="treeitem"]');
    if (first) first.tabIndex = 0;
  }

  /** A row of the layer table; at phone width the table stacks and each cell says its column
   * (`data-label`, shown by the stylesheet). */
  function row(attrs, ...cells) {
    return h('tr', attrs, cells.map((c, i) => h('td', { class: i ? 'n' : null, 'data-label': COLUMNS[i] }, c)));
  }

  /** Opens the path from a root down to `id` and marks it; `focus: false` leaves the focus
   * where it is (a node restored from the URL while another tab shows). */
  async function reveal(id, terms = [], { focus: take = true } = {}) {
    for (const x of tree.querySelectorAll('.marked')) x.classList.remove('marked');
    let path;
    try {
      path = (await get('/v1/dashboard/dag/path', { key, id })).path;
    } catch (e) {
      tree.prepend(h('li', {}, errorBox(e)));
      return;
    }
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
      if (target.dataset.kind === 'summary') await expand(target, terms);
      focus(target, !take);
      if (take) target.scrollIntoView({ block: 'center' });
    }
  }

  /** Forgets the node in hand (the URL names none any more). */
  function unmark() {
    for (const x of tree.querySelectorAll('.marked')) x.classList.remove('marked');
    current = null;
    crumbs.hidden = true;
  }

  return { load, reveal, unmark };
}
