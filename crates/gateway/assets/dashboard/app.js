// The dashboard: a hash router over three views (sessions, one session, engines).
import { renderSessions } from './sessions.js';
import { renderSession } from './session.js';
import { renderEngines } from './engines.js';
import { errorBox, fill } from './ui.js';

const main = document.getElementById('main');
let cleanup = null;

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  document.body.dataset.ready = '';
  for (const a of document.querySelectorAll('[data-nav]')) a.removeAttribute('aria-current');
  const parts = hash.split('/').filter(Boolean);
  let view;
  if (parts[0] === 'session' && parts[1]) {
    view = renderSession(main, decodeURIComponent(parts[1]), new URLSearchParams(parts.slice(2).join('/')));
  } else if (parts[0] === 'engines') {
    document.querySelector('[data-nav="engines"]')?.setAttribute('aria-current', 'page');
    view = renderEngines(main);
  } else {
    document.querySelector('[data-nav="sessions"]')?.setAttribute('aria-current', 'page');
    view = renderSessions(main);
  }
  Promise.resolve(view)
    .then((c) => {
      cleanup = typeof c === 'function' ? c : null;
    })
    .catch((e) => fill(main, errorBox(e)));
}

window.addEventListener('hashchange', route);
route();
