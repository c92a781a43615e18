// Small DOM helpers: elements are built with createElement and text nodes (never innerHTML),
// so stored messages cannot inject markup.

/** `h('div', {class: 'x', onclick}, child, 'text', [more])`. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'style') Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

/** A real link to `href` (keyboard, middle click and a new tab work) whose plain click runs
 * `open` in the page instead of following it. */
export function pageLink(href, open, attrs, ...children) {
  return h(
    'a',
    {
      href,
      ...attrs,
      onclick: (e) => {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        open();
      },
    },
    ...children,
  );
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

const nf = new Intl.NumberFormat('en-US');

/** 12,345. */
export function num(n) {
  return n === undefined || n === null ? '–' : nf.format(n);
}

/** A short local date and time for epoch ms. */
export function when(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  return d.toLocaleString('en-GB', { year: 'numeric', month: 'short', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

/** `3 min ago`. */
export function ago(ms) {
  if (!ms) return '–';
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** The text of a stored message (text blocks; tool calls by name). */
export function messageText(m) {
  if (!m) return '';
  if (typeof m.content === 'string') return m.content;
  if (!Array.isArray(m.content)) return '';
  return m.content
    .map((b) => (b.type === 'text' ? b.text : b.type === 'toolCall' ? `[tool call ${b.name}]` : b.type === 'thinking' ? '' : `[${b.type}]`))
    .filter(Boolean)
    .join('\n');
}

/** `text` with every case-insensitive occurrence of `terms` in a <mark>. */
export function highlight(text, terms) {
  const frag = document.createDocumentFragment();
  const words = (terms ?? []).filter((t) => t && t.length > 1);
  if (!words.length) {
    frag.append(text);
    return frag;
  }
  const escaped = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const re = new RegExp(`(${escaped.join('|')})`, 'gi');
  let last = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > last) frag.append(text.slice(last, m.index));
    frag.append(h('mark', {}, m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) frag.append(text.slice(last));
  return frag;
}

/** A horizontal bar of `segments` ({kind, tokens, label}) against `budget`. */
export function stackedBar(segments, budget, opts = {}) {
  const total = segments.reduce((a, s) => a + s.tokens, 0);
  const scale = Math.max(budget || 0, total, 1);
  const bar = h('div', { class: `bar ${opts.small ? 'bar-small' : ''}`, role: 'img', 'aria-label': opts.label ?? `${num(total)} of ${num(budget)} tokens` });
  for (const s of segments) {
    if (!s.tokens) continue;
    bar.append(h('span', { class: `seg seg-${s.kind}`, title: `${s.label}: ${num(s.tokens)} tokens`, style: { width: `${(100 * s.tokens) / scale}%` } }));
  }
  if (budget && total > budget) bar.classList.add('over');
  return bar;
}

/** A message line for an error. */
export function errorBox(e) {
  return h('p', { class: 'error', role: 'alert' }, e?.message ?? String(e));
}

/** Replaces `el`'s children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}
