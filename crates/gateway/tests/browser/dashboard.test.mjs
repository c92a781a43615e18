// Drives the gateway dashboard in headless Chromium (the system's, through playwright-core).
// Started by crates/gateway/tests/dashboard_browser.rs, which starts the gateway and passes:
//   DASHBOARD_URL, DASHBOARD_TOKEN, DASHBOARD_EXPECT (JSON, see the Rust test), CHROMIUM,
//   ARTIFACTS (screenshot directory).
// Prints one `CHECK <name>` line per check passed and `FIGURE <name> <value>` lines; exits
// non-zero with the reason on the first failure.
import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const url = process.env.DASHBOARD_URL;
const token = process.env.DASHBOARD_TOKEN;
const expect = JSON.parse(process.env.DASHBOARD_EXPECT ?? '{}');
const artifacts = process.env.ARTIFACTS;
mkdirSync(artifacts, { recursive: true });
const nf = new Intl.NumberFormat('en-US');

function check(ok, name, detail = '') {
  if (!ok) throw new Error(`${name} failed${detail ? `: ${detail}` : ''}`);
  console.log(`CHECK ${name}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
});
const consoleErrors = [];
let failed = null;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme: 'light' });
  const page = await context.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(`${m.text()} @ ${m.location()?.url ?? ''}`);
  });
  page.on('pageerror', (e) => consoleErrors.push(`page error: ${e.message}`));
  page.setDefaultTimeout(30_000);
  const sessionUrl = (key) => `${url}/#/session/${encodeURIComponent(key)}`;

  // Without credentials the page says how to get in (a document, not a console error).
  const denied = await (await fetch(`${url}/`)).text();
  check(denied.includes('?token='), 'login page names ?token=');

  // Login: /?token= sets the cookie and lands on the sessions page.
  await page.goto(`${url}/?token=${encodeURIComponent(token)}`);
  check(new URL(page.url()).search === '', 'the token leaves the address bar', page.url());
  await page.waitForSelector('body[data-ready="sessions"]');
  const cookies = await context.cookies();
  const c = cookies.find((x) => x.name === 'clawctx_gateway');
  check(c && c.httpOnly && c.sameSite === 'Strict' && !c.value.includes(token), 'cookie is HttpOnly, SameSite=Strict and not the token');

  // Sessions page lists the pre-filled session with its message count.
  const row = page.locator(`tr[data-session-key="${expect.key}"]`);
  await row.waitFor();
  const rowText = await row.innerText();
  check(rowText.includes(nf.format(expect.storedMessages)), 'sessions page lists the session with its messages', rowText);
  await page.fill('[data-testid="session-filter"]', 'no-such-session-xyz');
  check((await page.locator('tr[data-session-key]').count()) === 0, 'filter hides non-matching sessions');
  await page.fill('[data-testid="session-filter"]', expect.key.slice(-6));
  check((await page.locator(`tr[data-session-key="${expect.key}"]`).count()) === 1, 'filter keeps the matching session');
  await page.fill('[data-testid="session-filter"]', '');
  await page.selectOption('[data-testid="session-sort"]', 'messages');
  const firstKey = await page.locator('tr[data-session-key]').first().getAttribute('data-session-key');
  check(firstKey === expect.bigKey, 'sort by messages puts the largest first', firstKey);
  await page.screenshot({ path: join(artifacts, 'sessions.png'), fullPage: true });

  // Session page: the context bar's figures are assemble's.
  await page.goto(sessionUrl(expect.key));
  await page.waitForSelector('body[data-ready="session"]');
  const text = async (id) => (await page.locator(`[data-testid="${id}"]`).innerText()).trim();
  check((await text('ctx-estimated')) === nf.format(expect.estimatedTokens), 'context bar: engine estimate matches assemble', await text('ctx-estimated'));
  check((await text('ctx-total')) === nf.format(expect.totalTokens), 'context bar: total tokens match assemble', `${await text('ctx-total')} vs ${expect.totalTokens}`);
  check((await text('ctx-messages')) === nf.format(expect.messageCount), 'context bar: message count matches assemble');
  check((await text('ctx-budget')) === nf.format(expect.budget), 'context bar: budget is the call\'s');
  check((await text('ctx-summary-tokens')) === nf.format(expect.summaryTokens), 'context bar: summary tokens match assemble');
  check((await text('ctx-raw-tokens')) === nf.format(expect.rawTokens), 'context bar: raw tokens match assemble');
  check((await page.locator('[data-testid="context"] .bar .seg-summary').count()) === expect.summaryCount, 'one bar segment per summary');
  check((await text('ctx-left-out')).startsWith('Left out'), 'what was left out is named');
  // Nothing the card says was left out is in its own bar and parts (issue #39: the summaries
  // sent were listed as left out when the messages between them and the tail were dropped).
  const leftIds = await page.locator('[data-testid="ctx-left-out"] [data-item]').evaluateAll((els) => els.map((e) => e.dataset.item));
  const sentIds = await page.locator('[data-testid="ctx-parts"] [data-item]').evaluateAll((els) => els.map((e) => e.dataset.item));
  check(leftIds.length > 0 && sentIds.length > 0, 'the card lists left-out items and sent summaries', JSON.stringify({ leftIds, sentIds }));
  const both = leftIds.filter((id) => sentIds.includes(id));
  check(both.length === 0, 'no item is both left out and in the assembled context', JSON.stringify(both));
  await page.screenshot({ path: join(artifacts, 'session.png'), fullPage: false });

  // Transcript: tool calls and results are folded.
  const folded = page.locator('[data-testid="messages"] details.fold');
  check((await folded.count()) > 0 && !(await folded.first().evaluate((d) => d.open)), 'tool calls and results are folded');
  await page.click('[data-testid="older"]');
  await page.waitForFunction(() => document.querySelector('[data-testid="messages"] article')?.dataset.seq !== undefined);

  // DAG: open nodes covering seq 3 down to the planted message.
  await page.click('#tab-dag');
  await page.waitForSelector('[data-testid="dag-tree"] [role="treeitem"]');
  let opened = 0;
  for (;;) {
    const nodes = page.locator('[data-testid="dag-tree"] [role="treeitem"]:visible');
    const n = await nodes.count();
    let target = null;
    for (let i = n - 1; i >= 0; i--) {
      const node = nodes.nth(i);
      const first = Number(await node.getAttribute('data-first-seq'));
      const last = Number(await node.getAttribute('data-last-seq'));
      if (first <= expect.plantedSeq && expect.plantedSeq <= last) {
        target = node;
        break;
      }
    }
    check(target !== null, `a DAG node covers seq ${expect.plantedSeq} (level ${opened})`);
    if ((await target.getAttribute('data-kind')) === 'message') {
      const label = await target.innerText();
      check(label.includes(expect.plantedWords), 'opening DAG nodes reaches the planted message', label);
      break;
    }
    await target.locator(':scope > .node-label').click();
    await page.waitForFunction((el) => el.getAttribute('aria-expanded') === 'true' && el.querySelector(':scope > ul [role="treeitem"]'), await target.elementHandle());
    opened++;
    check(opened < 12, 'the DAG is not deeper than 12');
  }
  check(opened >= 1, 'at least one summary was opened on the way', String(opened));
  check((await page.locator('[data-testid="dag-tree"] .in-frontier').count()) > 0, 'the active frontier is highlighted');
  check((await page.locator('[data-testid="dag-layers"] tr[data-depth]').count()) >= 1, 'layers by depth are listed');
  await page.screenshot({ path: join(artifacts, 'dag.png'), fullPage: false });

  // DAG by keyboard: first root, Right opens, Right goes to the first child, Left back up.
  const root = page.locator('[data-testid="dag-tree"] > [role="treeitem"]').first();
  await root.locator(':scope > .node-label').click(); // toggles: collapse or expand
  await root.focus();
  if ((await root.getAttribute('aria-expanded')) === 'true') await page.keyboard.press('ArrowLeft');
  check((await root.getAttribute('aria-expanded')) === 'false', 'Left closes a node');
  await page.keyboard.press('ArrowRight');
  await page.waitForFunction((el) => el.getAttribute('aria-expanded') === 'true', await root.elementHandle());
  await page.keyboard.press('ArrowRight');
  const focusedLevel = await page.evaluate(() => document.activeElement?.getAttribute('aria-level'));
  check(focusedLevel === '2', 'Right on an open node moves to its first child', focusedLevel);
  if ((await page.evaluate(() => document.activeElement?.getAttribute('aria-expanded'))) === 'true') {
    await page.keyboard.press('ArrowLeft');
    check((await page.evaluate(() => document.activeElement?.getAttribute('aria-expanded'))) === 'false', 'Left closes an open child');
  }
  await page.keyboard.press('ArrowLeft');
  check((await page.evaluate(() => document.activeElement?.getAttribute('aria-level'))) === '1', 'Left on a closed child moves to its parent');
  await page.keyboard.press('ArrowDown');
  check((await page.evaluate(() => document.activeElement?.getAttribute('role'))) === 'treeitem', 'Down moves between nodes');

  // Recall search finds the planted message, highlights it, expands it, shows it.
  await page.click('#tab-search');
  await page.fill('[data-testid="search-query"]', expect.plantedWords.split(' ')[0]);
  await page.keyboard.press('Enter');
  const hit = page.locator(`[data-testid="search-results"] .hit[data-id="${expect.plantedId}"]`);
  await hit.waitFor();
  check((await hit.locator('mark').count()) > 0, 'search hits are highlighted');
  check((await page.evaluate(() => document.activeElement?.classList.contains('hit'))), 'the first hit takes the focus (keyboard)');
  await hit.focus();
  await page.keyboard.press('Enter');
  await hit.locator('.expanded-item').first().waitFor();
  check((await hit.locator('.expanded-item').first().innerText()).includes(expect.plantedWords), 'lcm_expand on the hit shows the message');
  await page.screenshot({ path: join(artifacts, 'search.png'), fullPage: false });
  await page.keyboard.press('t');
  const marked = page.locator(`[data-testid="messages"] article.marked[data-id="${expect.plantedId}"]`);
  await marked.waitFor();
  check((await marked.locator('mark').count()) > 0, 'the hit is highlighted in the transcript');
  await page.click('#tab-search');
  await hit.locator('[data-action="dag"]').click();
  await page.locator(`[data-testid="dag-tree"] .node.marked[data-id="${expect.plantedId}"]`).waitFor();
  check(true, 'the hit is revealed and marked in the DAG');
  await page.click('#tab-search');
  await page.selectOption('[data-testid="search-mode"]', 'regex');
  await page.fill('[data-testid="search-query"]', 'quokka-77[0-9]+');
  await page.evaluate(() => document.querySelector('[data-testid="search-results"]').replaceChildren());
  await page.click('[data-testid="search-go"]');
  await hit.waitFor();
  check(true, 'regex mode finds it too');

  const hashParams = () => new URLSearchParams(new URL(page.url()).hash.split('/').slice(3).join('/'));
  const inView = (loc) => loc.evaluate((el) => {
    const r = el.getBoundingClientRect();
    return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;
  });

  // A hit inside a folded tool call (its arguments) and a folded tool result: following it
  // opens that fold, with the match highlighted and scrolled into view.
  for (const [word, id] of [[expect.toolCallWord, expect.toolCallId], [expect.toolResultWord, expect.toolResultId]]) {
    await page.click('#tab-search');
    await page.selectOption('[data-testid="search-mode"]', 'full_text');
    await page.fill('[data-testid="search-query"]', word);
    await page.click('[data-testid="search-go"]');
    const toolHit = page.locator(`[data-testid="search-results"] .hit[data-id="${id}"]`);
    await toolHit.waitFor();
    await toolHit.locator('[data-action="transcript"]').click();
    const article = page.locator(`[data-testid="messages"] article.marked[data-id="${id}"]`);
    await article.waitFor();
    const fold = article.locator('details.fold');
    check((await fold.count()) === 1 && (await fold.evaluate((d) => d.open)), `the fold holding "${word}" is opened`);
    const match = fold.locator('pre mark').first();
    check((await match.count()) === 1 && (await match.innerText()).toLowerCase() === word, `"${word}" is highlighted inside the fold`);
    check(await inView(match), `"${word}" is scrolled into view`);
    check((await page.locator('[data-testid="messages"] article:not(.marked) details.fold:not([open])').count()) > 0, 'folds without a match stay folded');
  }

  // State in the URL: the search comes back on reload (its hits shown), and so does a message
  // the transcript was opened around.
  check(hashParams().get('q') === expect.toolResultWord && hashParams().get('around') === expect.toolResultId, 'the search and the message are in the URL', page.url());
  await page.reload();
  await page.waitForSelector('body[data-ready="session"]');
  check(await page.locator(`[data-testid="messages"] article.marked[data-id="${expect.toolResultId}"] details.fold[open] mark`).isVisible(), 'reload: the transcript is around the message, its fold open');
  await page.click('#tab-search');
  check((await page.inputValue('[data-testid="search-query"]')) === expect.toolResultWord, 'reload: the query is back');
  check((await page.locator(`[data-testid="search-results"] .hit[data-id="${expect.toolResultId}"]`).count()) === 1, 'reload: the search ran again, its hits shown');

  // The compaction timeline: each pass links to the summaries it wrote; one opens in the DAG.
  await page.click('#tab-timeline');
  const passes = page.locator('[data-testid="timeline-list"] > li');
  const passCount = await passes.count();
  check(passCount > 0, 'the timeline lists passes');
  for (let i = 0; i < passCount; i++) {
    const links = await passes.nth(i).locator('[data-testid="pass-summaries"] a[data-item^="sum_"]').count();
    check(links > 0, `pass ${i} links to its summaries`, String(links));
  }
  const passLink = passes.last().locator('[data-testid="pass-summaries"] a').first();
  const passSummary = await passLink.getAttribute('data-item');
  const nodeBefore = hashParams().get('node');
  await passLink.click();
  const openNode = page.locator(`[data-testid="dag-tree"] .node.marked[data-id="${passSummary}"]`);
  await openNode.waitFor();
  check((await page.getAttribute('#tab-dag', 'aria-selected')) === 'true' && hashParams().get('node') === passSummary, 'a timeline link opens its summary in the DAG, named in the URL', page.url());
  const pathOf = (id) =>
    page.evaluate((id) => {
      const out = [];
      for (let x = document.querySelector(`[data-testid="dag-tree"] [data-id="${id}"]`); x; x = x.parentElement?.closest('[role="treeitem"]')) out.unshift(x.dataset.id);
      return out;
    }, id);
  const crumbIds = () => page.locator('[data-testid="dag-crumbs"] a').evaluateAll((as) => as.map((a) => a.dataset.item ?? a.dataset.id));
  check(JSON.stringify(await crumbIds()) === JSON.stringify(await pathOf(passSummary)), 'the breadcrumb is the node\'s path');
  // Reload: the node is open again, with its path expanded.
  await page.reload();
  await page.waitForSelector('body[data-ready="session"]');
  await openNode.waitFor();
  const path = await pathOf(passSummary);
  const expanded = await page.evaluate((ids) => ids.slice(0, -1).every((id) => document.querySelector(`[data-testid="dag-tree"] [data-id="${id}"]`)?.getAttribute('aria-expanded') === 'true'), path);
  check(expanded && path.at(-1) === passSummary, 'reload: the DAG node is open, its path expanded', JSON.stringify(path));
  check(JSON.stringify(await crumbIds()) === JSON.stringify(path), 'reload: the breadcrumb is back');
  // Back returns to where the link was followed; Forward goes there again.
  await page.reload();
  await page.waitForSelector('body[data-ready="session"]');
  await page.goBack();
  await page.waitForFunction(() => document.querySelector('#tab-timeline')?.getAttribute('aria-selected') === 'true');
  check(hashParams().get('node') === nodeBefore && nodeBefore !== passSummary, 'Back: the timeline again, the node named before', page.url());
  await page.waitForFunction(
    ([gone, back]) => !document.querySelector(`[data-testid="dag-tree"] .node.marked[data-id="${gone}"]`) && document.querySelector(`[data-testid="dag-tree"] .node.marked[data-id="${back}"]`),
    [passSummary, nodeBefore],
  );
  check(true, 'Back: the node named before is marked again, the summary no longer');
  await page.goForward();
  await page.waitForFunction(() => document.querySelector('#tab-dag')?.getAttribute('aria-selected') === 'true');
  await openNode.waitFor();
  check(true, 'Forward: the node again');

  // The context card's left-out items land: a summary opens in the DAG, a raw message (a
  // narrower assembly leaves some out) opens the transcript at it, highlighted.
  const leftSummary = page.locator('[data-testid="ctx-left-out"] a[data-item^="sum_"]').first();
  check((await leftSummary.count()) === 1, 'left-out summaries are links');
  const leftSummaryId = await leftSummary.getAttribute('data-item');
  await leftSummary.click();
  await page.locator(`[data-testid="dag-tree"] .node.marked[data-id="${leftSummaryId}"]`).waitFor();
  check(hashParams().get('node') === leftSummaryId, 'a left-out summary opens in the DAG');
  const narrow = await fetch(`${url}/v1/engine/assemble`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ sessionId: expect.sessionId, sessionKey: expect.key, messages: [], tokenBudget: expect.narrowBudget }),
  });
  check(narrow.ok, 'the narrow assembly ran', String(narrow.status));
  await page.reload();
  await page.waitForSelector('body[data-ready="session"]');
  const leftMessage = page.locator('[data-testid="ctx-left-out"] a[data-item^="msg_"]').first();
  check((await leftMessage.count()) === 1, 'left-out raw messages are links', await text('ctx-left-out'));
  {
    // Narrower than the raw tail: the engine keeps its summaries and drops messages between
    // them and the newest; the summaries it sent are not "left out".
    const left = await page.locator('[data-testid="ctx-left-out"] [data-item]').evaluateAll((els) => els.map((e) => e.dataset.item));
    const sent = await page.locator('[data-testid="ctx-parts"] [data-item]').evaluateAll((els) => els.map((e) => e.dataset.item));
    const both = left.filter((id) => sent.includes(id));
    check(both.length === 0, 'after a narrow assembly, no item is both left out and in the assembled context', JSON.stringify({ both, left, sent }));
  }
  const leftMessageId = await leftMessage.getAttribute('data-item');
  await leftMessage.click();
  const leftArticle = page.locator(`[data-testid="messages"] article.marked[data-id="${leftMessageId}"]`);
  await leftArticle.waitFor();
  check((await page.getAttribute('#tab-transcript', 'aria-selected')) === 'true' && (await inView(leftArticle)), 'a left-out raw message opens the transcript at it');
  await page.goBack();
  await page.waitForFunction(() => document.querySelector('#tab-dag')?.getAttribute('aria-selected') === 'true');
  check(true, 'Back from the message: the DAG again');

  // Live: a turn on the open session updates the page, including a compaction.
  await page.click('#tab-transcript');
  await page.waitForSelector('#live-status[data-state="connected"]');
  const before = await text('ctx-total');
  const turn = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-clawctx-session': expect.key },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: expect.livePrompt }] }),
  });
  check(turn.ok, 'the live turn ran', String(turn.status));
  await page.waitForFunction(() => (document.body.dataset.events ?? '').split(' ').includes('turnDone'), null, { timeout: 30_000 });
  await page.waitForFunction((b) => document.querySelector('[data-testid="ctx-total"]')?.textContent.trim() !== b, before, { timeout: 30_000 });
  check(true, 'the context bar updated live from the turn');
  // lossless compacts after the reply (background maintenance): its event follows the turn's.
  await page.waitForFunction(() => (document.body.dataset.events ?? '').split(' ').includes('compaction'), null, { timeout: 60_000 }).catch(() => {});
  check((await page.locator('#live-status').getAttribute('data-event')) === 'compaction', 'a compaction during the turn was shown live');
  await page.click('#tab-timeline');
  check((await page.locator('[data-testid="timeline-list"] li').count()) >= 2, 'the compaction timeline lists the compactions');
  await page.screenshot({ path: join(artifacts, 'timeline.png'), fullPage: false });

  // Engines: the quarantined plugin with its reason; secrets masked.
  await page.goto(`${url}/#/engines`);
  await page.waitForSelector('body[data-ready="engines"]');
  const q = page.locator(`[data-testid="quarantines"] tr[data-engine="${expect.quarantinedEngine}"]`);
  await q.waitFor();
  check((await q.innerText()).includes(expect.quarantineReason), 'a quarantined plugin shows its reason');
  const config = await page.locator('[data-testid="config"]').innerText();
  check(!config.includes(expect.secret) && config.includes('••••'), 'secrets are masked in the config');
  await page.screenshot({ path: join(artifacts, 'engines.png'), fullPage: true });

  // Phone width: the session page still lays out (no horizontal scroll).
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(sessionUrl(expect.key));
  await page.waitForSelector('body[data-ready="session"]');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 1, 'no horizontal scroll at phone width', String(overflow));
  await page.screenshot({ path: join(artifacts, 'session-phone.png'), fullPage: false });
  // The DAG and the compaction timeline of the 10,000-message session (deep DAG, many passes).
  for (const tab of ['dag', 'timeline', 'turns']) {
    await page.goto(`${sessionUrl(expect.bigKey)}/tab=${tab}`);
    await page.waitForSelector('body[data-ready="session"]', { timeout: 60_000 });
    if (tab === 'dag') {
      // Open the deepest path: the deepest child of each level, down to a leaf summary.
      let node = page.locator('[data-testid="dag-tree"] > [role="treeitem"]').first();
      const chain = [];
      for (;;) {
        chain.push(await node.getAttribute('data-id'));
        await node.locator(':scope > .node-label').click();
        await page.waitForFunction((el) => el.getAttribute('aria-expanded') === 'true' && el.querySelector(':scope > ul [role="treeitem"]'), await node.elementHandle());
        const kids = node.locator(':scope > ul > [role="treeitem"][data-kind="summary"]');
        const depths = await kids.evaluateAll((xs) => xs.map((x) => Number(x.dataset.depth)));
        if (!depths.length) break;
        node = kids.nth(depths.indexOf(Math.max(...depths)));
        check(chain.length < 16, 'the DAG is not deeper than 16');
      }
      console.log(`FIGURE dag_phone_levels ${chain.length}`);
      check(chain.length >= 3, 'the 10,000-message DAG has several levels', String(chain.length));
      const crumbs = page.locator('[data-testid="dag-crumbs"] a');
      check(JSON.stringify(await crumbs.evaluateAll((as) => as.map((a) => a.dataset.id))) === JSON.stringify(chain), 'phone: the breadcrumb lists every level of the open path');
      const box = await page.locator('[data-testid="dag-crumbs"]').evaluate((el) => el.getBoundingClientRect().right);
      check(box <= (await page.evaluate(() => window.innerWidth)), 'phone: the breadcrumb stays inside the page', String(box));
      // The layer table keeps its column labels: every cell of the stacked rows says its column.
      const labels = await page.locator('[data-testid="dag-layers"] tr[data-depth]').first().locator('td').evaluateAll((tds) =>
        tds.map((td) => [td.dataset.label, getComputedStyle(td, '::before').content, td.getBoundingClientRect().width]),
      );
      const headers = await page.locator('[data-testid="dag-layers"] th').allInnerTexts();
      check(
        labels.length === headers.length && labels.every(([l, content, w], i) => l === headers[i] && content !== 'none' && content !== 'normal' && w > 0),
        'phone: the layer table labels each cell',
        JSON.stringify(labels),
      );
      // A crumb goes back up: the second level opens (marked, focused, in the URL).
      const up = chain[1];
      await crumbs.nth(1).click();
      await page.locator(`[data-testid="dag-tree"] .node.marked[data-id="${up}"]`).waitFor();
      check((await page.evaluate(() => document.activeElement?.dataset.id)) === up, 'phone: a crumb opens its node and focuses it');
      check((await crumbs.count()) === 2 && hashParams().get('node') === up, 'phone: the breadcrumb and the URL follow', page.url());
    }
    const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    await page.screenshot({ path: join(artifacts, `${tab}-phone.png`), fullPage: false });
    check(over <= 1, `${tab}: no horizontal scroll at phone width`, String(over));
  }
  // Beyond six levels: the fixture's compaction stops at depth 3 (its budget), so the DAG
  // routes answer a synthetic ten-level chain (long ids, two children a node) for this part.
  const LEVELS = 10;
  const sumNode = (depth) => ({
    id: `sum_${9_000_000_000 + depth}`, kind: 'summary', depth, tokens: 300, sourceTokens: 3000 * (depth + 1), firstSeq: 0, lastSeq: 9999,
    childCount: 2, inFrontier: depth === LEVELS - 1, preview: `A summary at depth ${depth} of everything below it, with words long enough to wrap: ${'transshipment '.repeat(8)}`,
  });
  const depthOf = (id) => Number(id.slice(4)) - 9_000_000_000;
  await page.route(/\/v1\/dashboard\/dag(\/|\?)/, (route) => {
    const u = new URL(route.request().url());
    const id = u.searchParams.get('id');
    let body;
    if (u.pathname.endsWith('/dag')) {
      body = { layers: Array.from({ length: LEVELS }, (_, d) => ({ depth: d, count: LEVELS - d, tokens: 300, sourceTokens: 3000, inFrontier: d === LEVELS - 1 ? 1 : 0 })), uncovered: { count: 0, tokens: 0 }, roots: [sumNode(LEVELS - 1)] };
    } else if (u.pathname.endsWith('/children')) {
      const d = depthOf(id);
      const kids = d > 0 ? [sumNode(d - 1), { ...sumNode(d - 1), id: `sum_${8_000_000_000 + d}`, childCount: 0 }] : [{ id: 'msg_1', kind: 'message', role: 'user', tokens: 20, sourceTokens: 20, firstSeq: 1, lastSeq: 1, preview: 'a message' }];
      body = { id, children: kids };
    } else {
      body = { id, path: Array.from({ length: LEVELS - depthOf(id) }, (_, i) => sumNode(LEVELS - 1 - i).id) };
    }
    return route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
  });
  const deepest = sumNode(0).id;
  await page.goto(`${url}/#/engines`);
  await page.waitForSelector('body[data-ready="engines"]');
  await page.goto(`${sessionUrl(expect.bigKey)}/tab=dag&node=${deepest}`);
  await page.waitForSelector('body[data-ready="session"]', { timeout: 60_000 });
  await page.locator(`[data-testid="dag-tree"] .node.marked[data-id="${deepest}"]`).waitFor();
  const deepCrumbs = page.locator('[data-testid="dag-crumbs"] a');
  const deepChain = Array.from({ length: LEVELS }, (_, i) => sumNode(LEVELS - 1 - i).id);
  check(JSON.stringify(await deepCrumbs.evaluateAll((as) => as.map((a) => a.dataset.id))) === JSON.stringify(deepChain), `phone: a ${LEVELS}-level path from the URL, every level in the breadcrumb`);
  const deepOver = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  const crumbBox = await page.locator('[data-testid="dag-crumbs"]').evaluate((el) => [el.getBoundingClientRect().right, el.scrollWidth - el.clientWidth]);
  const deepLabel = await page.locator(`[data-testid="dag-tree"] [data-id="${deepest}"] > .node-label`).evaluate((el) => el.getBoundingClientRect());
  await page.screenshot({ path: join(artifacts, 'dag-deep-phone.png'), fullPage: false });
  check(deepOver <= 1 && crumbBox[0] <= 390 && crumbBox[1] <= 1, `phone: ${LEVELS} levels, no horizontal scroll (page or breadcrumb)`, `${deepOver} ${crumbBox}`);
  check(deepLabel.width >= 200, 'phone: the deepest node keeps a usable width', String(deepLabel.width));
  await deepCrumbs.nth(2).click();
  await page.locator(`[data-testid="dag-tree"] .node.marked[data-id="${deepChain[2]}"]`).waitFor();
  check((await deepCrumbs.count()) === 3 && hashParams().get('node') === deepChain[2] && (await page.evaluate(() => document.activeElement?.dataset.id)) === deepChain[2], 'phone: a crumb of the deep path opens its node');
  await page.unroute(/\/v1\/dashboard\/dag(\/|\?)/);

  // Paging the timeline: the fixture's sessions have a few compaction passes, so the session
  // route answers 250 synthetic ones for this part, the newest `timelineLimit` of them (0: all)
  // as the server does.
  const PASSES = 250;
  const pass = (i) => ({
    at: 1_700_000_000_000 + i * 60_000, kind: 'leaf', depth: 0, summaries: 1, summaryIds: [`sum_${7_000_000_000 + i}`],
    firstSeq: i * 10, lastSeq: i * 10 + 9, tokensBefore: 3000, tokensAfter: 300, summarizer: 'extractive',
  });
  const sessionRoute = /\/v1\/dashboard\/session\?/;
  const limits = [];
  await page.route(sessionRoute, async (route) => {
    const real = await route.fetch();
    const body = await real.json();
    const limit = Number(new URL(route.request().url()).searchParams.get('timelineLimit') ?? 100);
    limits.push(limit);
    const all = Array.from({ length: PASSES }, (_, i) => pass(i));
    body.timeline = limit > 0 ? all.slice(-limit) : all;
    body.timelineTotal = PASSES;
    return route.fulfill({ response: real, json: body });
  });
  await page.goto(`${url}/#/engines`);
  await page.waitForSelector('body[data-ready="engines"]');
  await page.goto(`${sessionUrl(expect.bigKey)}/tab=timeline`);
  await page.waitForSelector('body[data-ready="session"]', { timeout: 60_000 });
  const passRows = () => page.evaluate(() => document.querySelectorAll('[data-testid="timeline-list"] > li').length);
  check((await passRows()) === 100 && limits[0] === 100, 'timeline: the newest 100 passes first', `${await passRows()} ${limits}`);
  check(/newest 100 of 250/.test(await page.locator('[data-testid="timeline-more"]').innerText()), 'timeline: says how many of how many');
  await page.click('[data-testid="timeline-older"]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="timeline-list"] > li').length === 200);
  check(limits.at(-1) === 200, 'timeline: the next 100 older passes on request', String(limits));
  await page.click('[data-testid="timeline-older"]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="timeline-list"] > li').length === 250);
  check((await page.locator('[data-testid="timeline-more"]').count()) === 0 && limits.at(-1) === 0, 'timeline: the last older page is the rest, and nothing more is offered', String(limits));
  const timelineOver = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(timelineOver <= 1, 'timeline: 250 passes, no horizontal scroll at phone width', String(timelineOver));
  await page.unroute(sessionRoute);

  await page.goto(`${url}/#/`);
  await page.waitForSelector('body[data-ready="sessions"]');
  const overflow2 = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow2 <= 1, 'sessions page: no horizontal scroll at phone width', String(overflow2));
  await page.screenshot({ path: join(artifacts, 'sessions-phone.png'), fullPage: false });
  await page.setViewportSize({ width: 1280, height: 900 });

  // Page load of the 10,000-message session's view (fresh page each time).
  const loads = [];
  const loadRuns = 5;
  for (let i = 0; i < loadRuns; i++) {
    const p = await context.newPage();
    p.on('console', (m) => m.type() === 'error' && consoleErrors.push(`${m.text()}`));
    const t0 = Date.now();
    await p.goto(sessionUrl(expect.bigKey));
    await p.waitForSelector('body[data-ready="session"]', { timeout: 60_000 });
    loads.push(Date.now() - t0);
    if (i === 0) await p.screenshot({ path: join(artifacts, 'session-10k.png'), fullPage: false });
    if (i === loadRuns - 1) {
      // Where the time goes: each request of the last load (server time is most of it).
      const entries = await p.evaluate(() =>
        performance.getEntriesByType('resource').map((e) => [new URL(e.name).pathname, Math.round(e.duration)]),
      );
      for (const [path, ms] of entries) if (path.startsWith('/v1/')) console.log(`FIGURE request_ms ${path} ${ms}`);
    }
    await p.close();
  }
  loads.sort((a, b) => a - b);
  console.log(`FIGURE page_load_10k_ms_runs ${loads.join(',')}`);
  console.log(`FIGURE page_load_10k_ms_median ${loads[Math.floor(loads.length / 2)]}`);

  check(consoleErrors.length === 0, 'no console errors', consoleErrors.join(' | '));
} catch (e) {
  failed = e;
} finally {
  await browser.close();
}
if (failed) {
  console.error(`FAIL ${failed.message}`);
  if (consoleErrors.length) console.error(`console errors: ${consoleErrors.join(' | ')}`);
  process.exit(1);
}
console.log('OK');
