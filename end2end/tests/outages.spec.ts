import { test, expect } from '@playwright/test';
import { hydrated, newSession, printedUrl, send, sessionDetail, shot } from './helpers';

const outages = (page: any) => page.getByRole('status', { name: 'Models out' });

test('outage: a parked turn shows its model\'s banner on every page, and it goes when nothing waits', async ({ context }) => {
  const page = await context.newPage();
  const sid = await newSession(page, 'demo-down', 'parked behind an outage');
  await page.getByLabel('Auto retry').selectOption('background');
  await expect.poll(async () => (await sessionDetail(context.request, sid)).session.auto_retry).toBe('background');
  await send(page, 'wait for it');

  // The turn fails on a 529 and parks behind demo-down's outage: one banner for the model.
  const line = outages(page).locator('.outage');
  await expect(line).toHaveCount(1);
  await expect(line).toHaveText(/^demo\/demo-down has been down since \d\d:\d\d · 1 turn waiting · next try \d\d:\d\d$/);

  // Another tab, on no session at all, shows the same banner.
  const other = await context.newPage();
  await other.goto(printedUrl());
  await hydrated(other);
  await expect(outages(other).locator('.outage')).toHaveText(/^demo\/demo-down .* · 1 turn waiting/);
  await shot(other, 'outage-banner');

  // Nothing waits once the operator ends the server's retry: the banners go, in both tabs.
  await page.locator('.retry-banner').getByRole('button', { name: 'Cancel' }).click();
  await expect(outages(page)).toHaveCount(0);
  await expect(outages(other)).toHaveCount(0);
});
