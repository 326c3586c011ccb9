import { test, expect } from '@playwright/test';
import { hydrated, newSession, send, sessionDetail, shot } from './helpers';

const banner = (page: any) => page.locator('.retry-banner');
const replies = (page: any) => page.locator('li.msg.agent');


test('background: the server retries with the tab closed, and the page counts down to its fires_at', async ({ context }) => {
  const page = await context.newPage();
  const sid = await newSession(page, 'demo-busy', 'background retry');
  await page.getByLabel('Auto retry').selectOption('background');
  await expect.poll(async () => (await sessionDetail(context.request, sid)).session.auto_retry).toBe('background');
  await send(page, 'walk away');

  const countdown = banner(page).locator('.server-retry');
  await expect(countdown).toHaveText(/Retrying on the server in \d+ s \(attempt 1\)/);
  const waiting = (await sessionDetail(context.request, sid)).session.waiting_retry;
  expect(waiting.attempt).toBe(1);
  expect(waiting.reason).toBe('overloaded');
  // The page shows the server's countdown, not one of its own.
  const shown = Number((await countdown.textContent())!.match(/in (\d+) s/)![1]);
  const left = Math.ceil((waiting.fires_at - Date.now()) / 1000);
  expect(Math.abs(shown - left)).toBeLessThanOrEqual(1);
  await shot(page, 'background-countdown');

  const url = page.url();
  await page.close();
  // No tab is open: the server fires the retry and the reply is written.
  await expect
    .poll(async () => (await sessionDetail(context.request, sid)).runs.map((r: any) => [r.kind, r.status]), { timeout: 20_000 })
    .toEqual([['prompt', 'failed'], ['resend', 'completed']]);

  const again = await context.newPage();
  await again.goto(url);
  await hydrated(again);
  await expect(replies(again).last().locator('.content')).toContainText('walk away');
  await expect(banner(again)).toHaveCount(0);
  await expect(again.getByLabel('Auto retry')).toHaveValue('background');
  await shot(again, 'background-reopened');
});

test('background: Cancel on the page ends the server\'s waiting retry', async ({ page }) => {
  const sid = await newSession(page, 'demo-down', 'background cancel');
  await page.getByLabel('Auto retry').selectOption('background');
  await expect.poll(async () => (await sessionDetail(page.request, sid)).session.auto_retry).toBe('background');
  await send(page, 'stop it');
  await expect(banner(page).locator('.server-retry')).toBeVisible();
  await banner(page).getByRole('button', { name: 'Cancel' }).click();
  await expect(banner(page).locator('.server-retry')).toHaveCount(0);
  await expect(banner(page)).toContainText('This turn can be retried.');
  expect((await sessionDetail(page.request, sid)).session.waiting_retry ?? null).toBeNull();
  await page.waitForTimeout(3_500);
  expect((await sessionDetail(page.request, sid)).runs.length).toBe(1);
});
