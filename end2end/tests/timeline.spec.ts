// Issue 26, the page's side of providers and fallback: the model field offers the catalogue,
// a reply says which model answered when its turn fell back, and each turn's timeline (read
// only when opened) shows its attempts, its fallback and its tool calls.
import { test, expect } from '@playwright/test';
import { resolve } from 'node:path';
import { hydrated, origin, printedUrl, runs, send } from './helpers';

test('the model field offers the catalogue, its default marked', async ({ page }) => {
  await page.goto(printedUrl());
  await hydrated(page);
  const list = await page.getByLabel('Model').getAttribute('list');
  const option = (id: string) => page.locator(`datalist#${list} option[value="${id}"]`);
  await expect(option('demo/demo')).toHaveAttribute('label', 'default · ok');
  // Its status as the cooldowns see it now (an earlier spec may have cooled it).
  await expect(option('demo/demo-overloaded')).toHaveAttribute('label', /^(ok|cooling until \d\d:\d\d|down)/);
  await expect(option('demo/demo-agent-flaky')).toHaveCount(1);
  await expect(page.getByLabel('Model')).toHaveAttribute('placeholder', 'model (default: demo/demo)');
});

test('a turn that fell back after its tool call says who answered, and its timeline shows it', async ({ page }) => {
  await page.goto(printedUrl()); // signs the page's requests in
  // A cookie-signed write names its origin, as the browser's own fetches do.
  const created = await page.request.post(`${origin()}/api/v1/sessions`, {
    headers: { Origin: origin() },
    data: { title: 'fell back after its tool', model: 'demo/demo-agent-flaky', fallbacks: ['demo/demo-agent'] },
  });
  expect(created.status()).toBe(201);
  const sid: string = (await created.json()).id;
  await page.goto(`${origin()}/s/${sid}`);
  await hydrated(page);
  const runReads: string[] = [];
  page.on('request', (r) => { if (r.url().includes('/api/v1/runs/')) runReads.push(r.url()); });

  await send(page, 'what are my sub-sessions?');
  // Step 2 fails on demo-agent-flaky (503: overloaded, through Tier 1) and demo-agent answers
  // it: one run.
  const reply = page.locator('li.msg.agent').last();
  await expect(reply.locator('.content')).toContainText(/I (have no|found \d+) sub-session/, { timeout: 30_000 });
  await expect(reply).not.toHaveClass(/streaming|failed/);
  await expect(reply.locator('.served')).toHaveText(
    'step 2 answered by demo/demo-agent — demo/demo-agent-flaky was overloaded');
  await expect.poll(async () => (await runs(page, sid)).map((r) => [r.kind, r.status, r.served.map((s: any) => s.model)]))
    .toEqual([['prompt', 'completed', ['demo/demo-agent-flaky', 'demo/demo-agent']]]);

  // Folded, and nothing read, until opened.
  const timeline = reply.locator('details.timeline');
  await expect(timeline).not.toHaveAttribute('open');
  expect(runReads).toEqual([]);
  await timeline.locator('summary').click();
  await expect(timeline.locator('.tl-head')).toHaveText(
    /^Started by the operator's prompt · (\d+ ms|\d+\.\d s) · completed$/);
  expect(runReads).toHaveLength(1);
  const rows = timeline.locator('.tl-row');
  await expect(rows.first().locator('.tl-at')).toHaveText('+0.0 s');
  await expect(timeline.locator('.tl-row.tool .tl-at')).toHaveText(/^\+\d+\.\d s$/);
  await expect(timeline.locator('.tl-row.tool .tl-text')).toHaveText(/^tool list_sessions \(mulligan\) · (\d+ ms|\d+\.\d s) · ok$/);
  await expect(timeline.locator('.tl-row.fallback')).toContainText(
    'step 2 fell back to demo/demo-agent: demo/demo-agent-flaky was overloaded');
  // Step 1 and the failed openings of step 2 on the flaky model, then the fallback's.
  const attempts = await timeline.locator('.tl-row.attempt .tl-text').allTextContents();
  expect(attempts[0]).toBe('attempt 1 · demo/demo-agent-flaky · answered');
  expect(attempts.slice(1, -1).every((t) => /^attempt \d · demo\/demo-agent-flaky · failed: /.test(t))).toBe(true);
  expect(attempts.length).toBeGreaterThanOrEqual(3);
  expect(attempts[attempts.length - 1]).toMatch(/^attempt \d · demo\/demo-agent · answered$/);
  // In time order: the tool call between step 1 and step 2, the fallback before its attempt.
  const kinds = await rows.evaluateAll((els) => els.map((e) => e.className.replace('tl-row ', '')));
  expect(kinds.indexOf('tool')).toBe(1);
  expect(kinds.slice(-2)).toEqual(['fallback', 'attempt']);
  // Bars sit on the run's axis.
  const bar = timeline.locator('.tl-row.tool .tl-bar');
  await expect(bar).toHaveAttribute('style', /^left:\d+\.\d\d%;width:\d+\.\d\d%$/);

  await reply.screenshot({ path: resolve(__dirname, '..', 'test-results', 'timeline.png') });
  // The README's picture, rewritten only when asked: `MULLIGAN_DOCS_SHOTS=1`.
  if (process.env.MULLIGAN_DOCS_SHOTS) {
    await reply.screenshot({ path: resolve(__dirname, '..', '..', 'docs', 'timeline.png') });
  }
});
