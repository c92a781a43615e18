// The Turns tab (the stored per-turn trace) in headless Chromium. Started by
// crates/gateway/tests/trace_browser.rs after a gateway restart, with DASHBOARD_URL,
// DASHBOARD_EXPECT (JSON: key, turn = the newest stored turn, previous = the one before),
// CHROMIUM and ARTIFACTS. Prints `CHECK <name>` per check and `OK` at the end; exits non-zero
// with the reason on the first failure.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const url = process.env.DASHBOARD_URL;
const expect = JSON.parse(process.env.DASHBOARD_EXPECT ?? '{}');
const artifacts = process.env.ARTIFACTS;
mkdirSync(artifacts, { recursive: true });

function check(ok, name, detail = '') {
  if (!ok) throw new Error(`${name} failed${detail ? `: ${detail}` : ''}`);
  console.log(`CHECK ${name}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
});
const errors = [];
let failed = null;
let page = null;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.setDefaultTimeout(30_000);
  const at = `${url}/#/session/${encodeURIComponent(expect.key)}/tab=turns&turn=${expect.turn}`;

  // A turn named in the URL opens with the tab, from the stored trace (the gateway restarted).
  await page.goto(at);
  await page.waitForSelector('body[data-ready="session"]');
  check((await page.getAttribute('#tab-turns', 'aria-selected')) === 'true', 'the Turns tab is selected from the URL');
  const title = page.locator('[data-testid="turn-title"]');
  await title.waitFor();
  check((await title.innerText()).trim() === `Turn ${expect.turn}`, 'the turn named in the URL is shown', await title.innerText());

  // The session's own record: the engine that served its turns.
  const engines = await page.locator('[data-testid="session-engines"]').innerText();
  check(/Served by lossless \(turns 1–\d+\)/.test(engines), 'the session names the engines that served its turns', engines);

  // What was left out, with a reason per item.
  const left = page.locator('[data-testid="turn-left-out"]');
  const reasons = await left.locator('.reason').allInnerTexts();
  check(reasons.length > 0 && reasons.every((r) => r.trim().length > 3), 'left-out items carry their reasons', JSON.stringify(reasons));
  const leftText = await left.innerText();
  check(/items left out/.test(leftText), 'the left-out count is said in words', leftText);
  const parts = await page.locator('[data-testid="turn-parts"] li').count();
  check(parts > 0, 'the parts sent are listed in order', String(parts));
  // The recalled block says why it quotes its message: the search score and terms matched.
  const hits = await page.locator('[data-testid="recall-hits"]').innerText();
  check(/msg_\d+ \(score \d+\.\d\d, \d+ terms? matched\)/.test(hits), 'the recalled block shows each hit with its score', hits);

  // The diff to the turn before.
  const diff = page.locator('[data-testid="turn-diff"]');
  const diffText = await diff.innerText();
  check(diffText.includes(`Since turn ${expect.previous}`), 'the diff names the turn before', diffText.slice(0, 200));
  check(/Came in/.test(diffText) && /Went out/.test(diffText), 'the diff says what came in and went out');
  await page.screenshot({ path: join(artifacts, 'turn.png'), fullPage: true });

  // Another turn from the list: shown, and kept in the URL.
  await page.click(`[data-testid="turn-${expect.previous}"]`);
  await page.waitForFunction((n) => document.querySelector('[data-testid="turn-title"]')?.textContent === `Turn ${n}`, expect.previous);
  check(new URL(page.url()).hash.includes(`turn=${expect.previous}`), 'the open turn is in the URL', page.url());

  // A reload of that URL lands on the same turn.
  await page.reload();
  await page.waitForFunction((n) => document.querySelector('[data-testid="turn-title"]')?.textContent === `Turn ${n}`, expect.previous);
  check(true, 'a reload lands on the same turn');

  // A burst of back-to-back turns while the transcript is open: it ends current.
  await page.click('#tab-transcript');
  await page.waitForSelector('[data-testid="messages"] .msg');
  // All sent at once: the gateway runs them one after another on the session's lane, so their
  // events arrive back to back.
  await Promise.all(
    Array.from({ length: expect.burst }, async (_, i) => {
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-clawctx-session': expect.key },
        body: JSON.stringify({ messages: [{ role: 'user', content: `burst turn ${i}` }] }),
      });
      if (r.status !== 200) throw new Error(`burst turn ${i}: HTTP ${r.status} ${await r.text()}`);
    }),
  );
  // Then engine-API assemblies of the session, one every 50 ms for a second: each publishes an
  // `assembled` event, so the last turn's `turnDone` is followed within a refresh's delay by
  // one that alone would reload only the context. The refresh must still cover the turn.
  await page.evaluate(async (key) => {
    for (let i = 0; i < 20; i++) {
      const r = await fetch('/v1/engine/assemble', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ sessionId: 'live-check', sessionKey: key, messages: [], tokenBudget: 400 }),
      });
      if (r.status !== 200) throw new Error(`assemble ${i}: HTTP ${r.status} ${await r.text()}`);
      await new Promise((done) => setTimeout(done, 50));
    }
  }, expect.key);
  check(
    (await page.evaluate(() => document.body.dataset.lastEvent)) === 'assembled',
    'the last live event is an assembly, after the turns',
  );
  await page.waitForFunction(
    ([reply, n]) => {
      const el = document.querySelector('[data-testid="transcript"]');
      return el && el.innerText.includes(reply) && el.innerText.includes(`of ${n}`);
    },
    [expect.lastReply, expect.storedAfterBurst],
    { timeout: 15_000 },
  );
  check(true, 'a live burst of turns leaves the transcript current');
  await page.click('#tab-turns');

  // Phone width: no horizontal scroll on the Turns tab.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  await page.screenshot({ path: join(artifacts, 'turn-390.png'), fullPage: true });
  check(overflow <= 0, 'no horizontal scroll at 390 px on the Turns tab', `${overflow} px too wide`);

  // A link naming a turn, opened on a phone: the turn is far below the first screen (the
  // context card and the list of turns come first), and the page must bring it into view.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const small = await phone.newPage();
  small.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  small.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  await small.goto(at);
  await small.waitForSelector('body[data-ready="session"]');
  await small.locator('[data-testid="turn-title"]').waitFor();
  const where = await small.evaluate(() => {
    const r = document.querySelector('[data-testid="turn-title"]').getBoundingClientRect();
    return { top: r.top, bottom: r.bottom, onPage: r.top + window.scrollY, screen: window.innerHeight };
  });
  await small.screenshot({ path: join(artifacts, 'turn-link-390.png') });
  check(where.onPage > where.screen, 'at 390 px the turn is below the first screen (what the check is about)', JSON.stringify(where));
  check(where.top >= 0 && where.bottom <= where.screen, `a link to turn=${expect.turn} opens with the turn in view at 390 px`, JSON.stringify(where));
  await phone.close();

  check(errors.length === 0, 'no console errors', errors.join('\n'));
} catch (e) {
  failed = e;
  if (page) {
    await page.screenshot({ path: join(artifacts, 'failed.png'), fullPage: true }).catch(() => {});
    const shown = await page.locator('main').innerText().catch(() => '');
    console.error(`the page showed:\n${shown.slice(0, 2000)}`);
    if (errors.length) console.error(`console errors:\n${errors.join('\n')}`);
  }
} finally {
  await browser.close();
}
if (failed) {
  console.error(failed.message);
  process.exit(1);
}
console.log('OK');
