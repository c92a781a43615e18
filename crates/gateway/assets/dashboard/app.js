// The dashboard: a hash router over three views (sessions, one session, engines). A hash change
// that stays on the open session (Back, Forward, a link within the page) is handed to that
// view's `update`, which shows what the URL now names without building the page again.
import { renderSessions } from './sessions.js';
import { renderSession } from './session.js';
import { renderEngines } from './engines.js';
import { errorBox, fill } from './ui.js';

const main = document.getElementById('main');
let cleanup = null;
// The session the page shows, once its view is ready: { key, update }.
let shown = null;
// Counts routes, so a view that finishes loading after the user left it is closed at once.
let generation = 0;

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const parts = hash.split('/').filter(Boolean);
  const sessionKey = parts[0] === 'session' && parts[1] ? decodeURIComponent(parts[1]) : null;
  const params = new URLSearchParams(parts.slice(2).join('/'));
  if (sessionKey !== null && shown?.key === sessionKey && shown.update) {
    document.body.dataset.ready = '';
    shown
      .update(params)
      .then(() => (document.body.dataset.ready = 'session'))
      .catch((e) => fill(main, errorBox(e)));
    return;
  }
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  shown = null;
  const mine = ++generation;
  document.body.dataset.ready = '';
  for (const a of document.querySelectorAll('[data-nav]')) a.removeAttribute('aria-current');
  let view;
  if (sessionKey !== null) {
    view = renderSession(main, sessionKey, params);
  } else if (parts[0] === 'engines') {
    document.querySelector('[data-nav="engines"]')?.setAttribute('aria-current', 'page');
    view = renderEngines(main);
  } else {
    document.querySelector('[data-nav="sessions"]')?.setAttribute('aria-current', 'page');
    view = renderSessions(main);
  }
  Promise.resolve(view)
    .then((c) => {
      const close = typeof c === 'function' ? c : null;
      if (mine !== generation) {
        close?.();
        return;
      }
      cleanup = close;
      if (sessionKey !== null) shown = { key: sessionKey, update: close?.update };
    })
    .catch((e) => mine === generation && fill(main, errorBox(e)));
}

window.addEventListener('hashchange', route);
route();
