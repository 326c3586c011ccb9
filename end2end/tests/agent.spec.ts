// Issue 16, the operator's page for agent turns: tool calls show where they happened, the
// banner says what a retry will do, a retry continues without calling the tool again, and
// Regenerate asks first when the turn ran tools.
import { test, expect, Page } from '@playwright/test';
import { newSession, origin, runs, send, shot } from './helpers';

const banner = (page: Page) => page.locator('.retry-banner');
const replies = (page: Page) => page.locator('li.msg.agent');
const toolCalls = (page: Page) => page.locator('.tool-call');

test('demo-agent-flaky: the tool call shows, the retry continues after it and it shows once', async ({ page }) => {
  const sid = await newSession(page, 'demo-agent-flaky', 'agent continues');
  await send(page, 'what are my sub-sessions?');

  // The tool call, inside the reply, after the text that came before it.
  const call = replies(page).last().locator('.tool-call[data-tool="list_sessions"]');
  await expect(call).toHaveAttribute('data-status', 'ok');
  await expect(call.locator('.tool-name')).toHaveText('list_sessions');
  await expect(call.locator('.tool-server')).toHaveText('mulligan');
  await expect(call.locator('.tool-time')).toHaveText(/^\d+(\.\d)? s$/);
  await expect(call.locator('.tool-result summary')).toHaveText(/^Result \(\d+ characters?\)$/);
  await expect(replies(page).last().locator('.content')).toHaveText(/^Let me check my sub-sessions first\./);

  // The step after it fails: the banner says a retry keeps the call.
  await expect(banner(page)).toContainText('A retry continues after 1 completed tool call.');
  await shot(page, 'agent-failed-after-tool');

  // Tier 2's countdown retries; the continuation answers without calling the tool again.
  await expect(replies(page).last().locator('.content')).toContainText(/I (have no|found \d+) sub-session/, {
    timeout: 30_000,
  });
  await expect(replies(page).last()).not.toHaveClass(/streaming|failed/);
  await expect(banner(page)).toHaveCount(0);
  await expect(toolCalls(page)).toHaveCount(1);
  await expect(toolCalls(page)).toHaveAttribute('data-status', 'ok');
  // The continuation the retry added is Mulligan's note (in words from the failure's class:
  // a 503 reads as the provider overloaded); the operator's one prompt is theirs.
  const note = page.locator('li.msg.note');
  await expect(note).toHaveText(/^Mulligan: cut off — the provider (was overloaded|had a server error); the turn continues\.$/);
  await expect(note).toHaveAttribute('title', /^Your previous turn was cut off by /);
  await expect(page.locator('li.msg.operator')).toHaveCount(1);
  const all = await runs(page, sid);
  expect(all.map((r) => [r.kind, r.status, r.tools_executed])).toEqual([
    ['prompt', 'failed', 1],
    ['continuation', 'completed', 0],
  ]);
  await shot(page, 'agent-continued');

  // The reply with the call: Regenerate asks first, naming the calls; declining sends nothing.
  const regenerate = replies(page).first().getByRole('button', { name: 'Regenerate' });
  const asked: string[] = [];
  page.once('dialog', (d) => { asked.push(d.message()); d.dismiss(); });
  await regenerate.click();
  await expect.poll(() => asked).toEqual([
    'This turn ran 1 tool call; regenerating may run it again. Regenerate?',
  ]);
  page.once('dialog', (d) => { asked.push(d.message()); d.accept(); });
  await regenerate.click();
  await expect.poll(() => asked.length).toBe(2);
  await expect.poll(async () => (await runs(page, sid)).map((r) => r.kind)).toEqual([
    'prompt', 'continuation', 'regenerate',
  ]);
});

test('a tool call shows running while it runs, then its result', async ({ page }) => {
  await newSession(page, 'demo-agent', 'a tool that takes a while');
  // The MCP server starts beside Mulligan: wait (bounded) until its tools are listed.
  await expect.poll(async () => {
    const r = await page.request.get(`${origin()}/api/v1/tools`);
    const servers: any[] = (await r.json()).servers ?? [];
    return servers.find((s) => s.name === 'every')?.status;
  }, { timeout: 30_000 }).toBe('ready');
  await send(page, 'call every__trigger-long-running-operation {"duration": 3, "steps": 3}');

  // The call is on the page while the tool still works: its `tool_call` event arrived live.
  const call = replies(page).last().locator('.tool-call[data-tool="trigger-long-running-operation"]');
  await expect(call).toHaveAttribute('data-status', 'running', { timeout: 10_000 });
  await expect(call.locator('.tool-server')).toHaveText('every');
  await shot(page, 'agent-tool-running');
  await expect(call).toHaveAttribute('data-status', 'ok', { timeout: 20_000 });
  await expect(replies(page).last()).not.toHaveClass(/streaming|failed/, { timeout: 10_000 });
});
