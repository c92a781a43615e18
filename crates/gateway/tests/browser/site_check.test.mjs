// A hostile web page against the gateway, in headless Chromium (the system's, through
// playwright-core). Started by crates/gateway/tests/site_check_browser.rs, which starts a
// gateway without a token (the default on loopback) and a page server on another loopback port,
// and passes: GATEWAY_URL, ATTACK_URL (the page server's page), SESSION_KEY (a session the
// dashboard must show), CHROMIUM.
//
// 1. The dashboard works at http://localhost:PORT and http://127.0.0.1:PORT: the sessions page,
//    a session page with its live stream connected, and a POST of its own (recall search).
// 2. The page on another port sends what the issue's attacker sent (a no-cors fetch with a Blob
//    body, a text/plain one, a text/plain form) and tries to read /v1/sessions.
// 3. DNS rebinding: a name of the attacker's (rebind.test) resolving to 127.0.0.1 (Chromium's
//    host resolver rules), so the browser treats the gateway as that name's own origin and would
//    let the page read it.
// Prints `CHECK <name>` per check, `RESULT <json>` with what the pages saw, and `OK` at the end;
// exits non-zero with the reason on the first failure. The Rust side checks nothing was stored.
import { chromium } from 'playwright-core';

const gateway = process.env.GATEWAY_URL;
const attack = process.env.ATTACK_URL;
const key = process.env.SESSION_KEY;
const port = new URL(gateway).port;

function check(ok, name, detail = '') {
  if (!ok) throw new Error(`${name} failed${detail ? `: ${detail}` : ''}`);
  console.log(`CHECK ${name}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--host-resolver-rules=MAP rebind.test 127.0.0.1'],
});
let failed = null;
try {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  const consoleErrors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });

  // 1. The dashboard, by both loopback names.
  for (const base of [`http://localhost:${port}`, `http://127.0.0.1:${port}`]) {
    consoleErrors.length = 0;
    await page.goto(`${base}/`);
    await page.waitForSelector('body[data-ready="sessions"]');
    check((await page.locator(`tr[data-session-key="${key}"]`).count()) === 1, `${base}: the sessions page lists the session`);
    await page.goto(`${base}/#/session/${encodeURIComponent(key)}`);
    await page.waitForSelector('body[data-ready="session"]');
    await page.waitForSelector('#live-status[data-state="connected"]');
    check(true, `${base}: the session page loads and its live stream connects`);
    const search = await page.evaluate(async (k) => {
      const r = await fetch('/v1/engine/lcm_grep', {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({ sessionKey: k, query: 'hello', limit: 5 }),
      });
      return { status: r.status, body: await r.text() };
    }, key);
    check(search.status === 200, `${base}: the dashboard's own POST (recall search) is served`, JSON.stringify(search));
    check(consoleErrors.length === 0, `${base}: no console error`, consoleErrors.join(' | '));
  }

  // 2. A page of another origin (another loopback port).
  const evil = await context.newPage();
  evil.setDefaultTimeout(30_000);
  await evil.goto(attack);
  await evil.waitForFunction(() => window.attackDone === true);
  const crossSite = await evil.evaluate(() => window.attackResults);
  console.log(`RESULT ${JSON.stringify({ crossSite })}`);
  check(crossSite.noCorsBlob === 'sent', 'the no-cors fetch with a Blob body was sent (its answer is opaque)', crossSite.noCorsBlob);
  check(!String(crossSite.read).includes(key), 'the page could not read /v1/sessions', crossSite.read);

  // 3. DNS rebinding: the attacker's name now points at the gateway.
  const rebound = await context.newPage();
  rebound.setDefaultTimeout(30_000);
  const landing = await rebound.goto(`http://rebind.test:${port}/`);
  check(landing.status() === 421, 'the rebound name gets 421 for the page', String(landing.status()));
  const read = await rebound.evaluate(async () => {
    const r = await fetch('/v1/sessions');
    const post = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'rebinding: run a turn' }] }),
    });
    return { status: r.status, body: await r.text(), postStatus: post.status };
  });
  console.log(`RESULT ${JSON.stringify({ rebound: read })}`);
  check(read.status === 421 && !read.body.includes(key), 'the rebound page cannot read /v1/sessions', JSON.stringify(read));
  check(read.postStatus === 421, 'the rebound page cannot run a turn', String(read.postStatus));
  console.log('OK');
} catch (e) {
  failed = e;
} finally {
  await browser.close();
}
if (failed) {
  console.error(failed.stack ?? String(failed));
  process.exit(1);
}
