import { test, expect } from '@playwright/test';
import { hydrated, newSession, origin, runs, send, shot } from './helpers';

const banner = (page: any) => page.locator('.retry-banner');
const replies = (page: any) => page.locator('li.msg.agent');

test('demo-flaky: Tier 1 recovers, the reply arrives and no banner shows', async ({ page }) => {
  const sid = await newSession(page, 'demo-flaky');
  await send(page, 'flaky hello');
  await expect(replies(page).last()).toHaveClass(/msg agent$/, { timeout: 30_000 });
  await expect(replies(page).last().locator('.content')).toContainText('flaky hello');
  await expect(banner(page)).toHaveCount(0);
  const [run] = await runs(page, sid);
  expect(run.status).toBe('completed');
  expect(run.tier1_attempts).toBe(3);
  await shot(page, 'tier1-recovered');
});

test('demo-busy: the countdown ticks, dispatches a regenerate and the reply arrives', async ({ page }) => {
  const sid = await newSession(page, 'demo-busy');
  await send(page, 'busy hello');
  const countdown = banner(page).locator('.countdown');
  await expect(countdown).toHaveText(/Retrying in [23] s \(attempt 1\)/);
  await expect(banner(page)).toContainText('overloaded');
  await shot(page, 'tier2-countdown');
  await expect(countdown).toHaveText(/Retrying in 1 s/);
  await expect(banner(page)).toHaveCount(0, { timeout: 15_000 });
  await expect(replies(page).last()).not.toHaveClass(/streaming|failed/, { timeout: 30_000 });
  await expect(replies(page).last().locator('.content')).toContainText('busy hello');
  const all = await runs(page, sid);
  expect(all.map((r: any) => [r.kind, r.status])).toEqual([['prompt', 'failed'], ['regenerate', 'completed']]);
  // The reply's timeline says who retried: this tab; a second tab reads it as another tab's.
  const head = (p: any) => p.locator('li.msg.agent').last().locator('details.timeline');
  await head(page).locator('summary').click();
  await expect(head(page).locator('.tl-head')).toHaveText(
    /^Started by an automatic retry in this tab \(regenerate, attempt 2\) · /);
  const other = await page.context().newPage();
  await other.goto(`${origin()}/s/${sid}`);
  await hydrated(other);
  await head(other).locator('summary').click();
  await expect(head(other).locator('.tl-head')).toHaveText(
    /^Started by an automatic retry in another tab \(regenerate, attempt 2\) · /);
  await other.close();
});

test('cancel during the countdown: it stops and no new run starts', async ({ page }) => {
  const sid = await newSession(page, 'demo-busy', 'cancel countdown');
  await send(page, 'please wait');
  await expect(banner(page).locator('.countdown')).toHaveText(/Retrying in/);
  await banner(page).getByRole('button', { name: 'Cancel' }).click();
  await expect(banner(page).locator('.countdown')).toHaveCount(0);
  await expect(banner(page)).toContainText('Automatic retry cancelled');
  await shot(page, 'tier2-cancelled');
  await page.waitForTimeout(4_500);
  expect((await runs(page, sid)).length).toBe(1);
});

test('demo-quota: "Retry after HH:MM" at the provider\'s time, and Retry now works', async ({ page }) => {
  const sid = await newSession(page, 'demo-quota');
  await send(page, 'quota hello');
  const countdown = banner(page).locator('.countdown');
  await expect(countdown).toContainText('retry after');
  const [failed] = await runs(page, sid);
  const until = failed.retry.retry_after_until;
  expect(failed.retry.retry_class).toBe('rate_limited');
  expect(until - Date.now()).toBeGreaterThan(2_900_000);
  const { hhmm, today } = await page.evaluate((t) => {
    const d = new Date(t);
    return {
      hhmm: `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`,
      today: d.toDateString() === new Date().toDateString(),
    };
  }, until);
  // Past local midnight (the test's clock decides), the time carries its date: "Wed 2 Dec 00:29".
  const when = today ? hhmm : `[A-Z][a-z]{2} \\d{1,2} [A-Z][a-z]{2} ${hhmm}`;
  // One sentence, one time: the cooldown and the scheduled retry are the same wait.
  await expect(countdown).toHaveText(new RegExp(`^Provider cooling down: retry after ${when} \\(in (49|50) min\\)$`));
  await expect(banner(page).getByRole('button', { name: 'Clear cooldown' })).toBeVisible();
  await shot(page, 'tier2-scheduled');
  await banner(page).getByRole('button', { name: 'Retry now' }).click();
  await expect.poll(async () => (await runs(page, sid)).length).toBe(2);
  await expect(countdown).toContainText('retry after');
  // The operator ends the cooldown: the button goes, and the providers list is empty.
  await banner(page).getByRole('button', { name: 'Clear cooldown' }).click();
  await expect(banner(page).getByRole('button', { name: 'Clear cooldown' })).toHaveCount(0);
  await expect(countdown).toContainText('Provider asked to wait: retry after');
  const providers = await page.request.get(`${origin()}/api/v1/providers`);
  expect((await providers.json()).cooldowns).toEqual([]);
});

test('demo-auth: no countdown; the reason, what to do and Regenerate are shown', async ({ page }) => {
  await newSession(page, 'demo-auth');
  await send(page, 'auth hello');
  await expect(banner(page)).toContainText('The provider rejected the API key.');
  await expect(banner(page)).toContainText('Fix MULLIGAN_API_KEY');
  // Said once, not twice.
  expect((await banner(page).textContent())!.split('rejected the API key').length).toBe(2);
  await expect(banner(page).locator('.countdown')).toHaveCount(0);
  await expect(replies(page).last().getByRole('button', { name: 'Regenerate' })).toBeVisible();
  await expect(replies(page).last().locator('.class')).toHaveText('API key rejected');
  await expect(replies(page).last().locator('.class')).toHaveAttribute('title', /auth_failed/);
  await shot(page, 'tier2-not-retryable');
  await page.waitForTimeout(3_500);
  await expect(banner(page).locator('.countdown')).toHaveCount(0);
});

test('Regenerate on an old reply supersedes everything after it', async ({ page }) => {
  const sid = await newSession(page, 'demo', 'regenerate');
  await send(page, 'first question');
  await expect(replies(page).nth(0)).not.toHaveClass(/streaming/, { timeout: 30_000 });
  await send(page, 'second question');
  await expect(replies(page).nth(1)).toContainText('second question', { timeout: 30_000 });
  await expect(replies(page).nth(1)).not.toHaveClass(/streaming/, { timeout: 30_000 });
  await replies(page).nth(0).getByRole('button', { name: 'Regenerate' }).click();
  await expect(page.locator('li.msg.operator')).toHaveCount(1);
  await expect(page.locator('li.msg.operator')).toContainText('first question');
  await expect(replies(page)).toHaveCount(1);
  await expect(replies(page).nth(0)).not.toHaveClass(/streaming/, { timeout: 30_000 });
  await expect(replies(page).nth(0)).toContainText('regenerated (attempt 2)');
  await page.reload();
  await hydrated(page);
  await expect(page.locator('li.msg')).toHaveCount(2);
  // The earlier attempts are folded away, and viewable.
  const fold = page.getByRole('button', { name: '2 earlier attempts' });
  await fold.click();
  await expect(page.locator('li.msg')).toHaveCount(5);
  await expect(page.locator('li.msg.superseded')).toHaveCount(3);
  await shot(page, 'superseded-unfolded');
  await page.getByRole('button', { name: 'Hide earlier attempts' }).click();
  await expect(page.locator('li.msg')).toHaveCount(2);
  const all = await runs(page, sid);
  expect(all.map((r: any) => r.kind)).toEqual(['prompt', 'prompt', 'regenerate']);
});

test('two tabs on one failed session count down together and start exactly one run', async ({ context }) => {
  const a = await context.newPage();
  const sid = await newSession(a, 'demo-busy', 'two tabs');
  const b = await context.newPage();
  await b.goto(`${origin()}/s/${sid}`);
  await hydrated(b);
  await send(a, 'one run only');
  await expect(banner(a).locator('.countdown')).toHaveText(/Retrying in/);
  await expect(banner(b).locator('.countdown')).toHaveText(/Retrying in/);
  await expect(replies(b).last()).not.toHaveClass(/streaming|failed/, { timeout: 30_000 });
  await expect(replies(a).last()).not.toHaveClass(/streaming|failed/, { timeout: 30_000 });
  await a.waitForTimeout(1_000);
  const all = await runs(a, sid);
  expect(all.map((r: any) => [r.kind, r.status])).toEqual([['prompt', 'failed'], ['regenerate', 'completed']]);
});

test('cancel while dispatching: no stray run survives', async ({ page }) => {
  const sid = await newSession(page, 'demo-busy', 'cancel dispatch');
  // Hold the regenerate's answer back after the server accepted it.
  await page.route('**/regenerate', async (route) => {
    const response = await route.fetch();
    await new Promise((r) => setTimeout(r, 1_000));
    await route.fulfill({ response }).catch(() => {});
  });
  await send(page, 'stop me');
  await expect(banner(page).locator('.countdown')).toHaveText('Retrying…', { timeout: 15_000 });
  await banner(page).getByRole('button', { name: 'Cancel' }).click();
  await expect.poll(async () => (await runs(page, sid)).map((r: any) => r.status)).toEqual(['failed', 'cancelled']);
  await page.waitForTimeout(3_000);
  expect((await runs(page, sid)).map((r: any) => r.status)).toEqual(['failed', 'cancelled']);
  await shot(page, 'tier2-cancel-dispatching');
});
