// Issue 14, the operator's page: a cancel that sticks, a Stop that can be clicked, one run per
// click, the countdown always in view. Each test reproduces one defect as an operator would.
import { test, expect, Page, Route } from '@playwright/test';
import { hydrated, newSession, origin, otherBrowser, printedUrl, runs, send, shot } from './helpers';

test.use({ timezoneId: 'Asia/Kolkata' });

const banner = (page: Page) => page.locator('.retry-banner');
const countdown = (page: Page) => banner(page).locator('.countdown');
const replies = (page: Page) => page.locator('li.msg.agent');

/** Opens an existing session in a page and waits for it to hydrate. */
async function open(page: Page, sid: string) {
  await page.goto(`${origin()}/s/${sid}`);
  await hydrated(page);
}

/** Asserts the session keeps exactly `n` runs for `ms` (a provider request would add one). */
async function staysAt(page: Page, sid: string, n: number, ms: number) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    expect((await runs(page, sid)).length).toBe(n);
    await page.waitForTimeout(500);
  }
}

test('cancel survives a reload: no provider request, "Automatic retry cancelled — Retry now"', async ({ page }) => {
  const sid = await newSession(page, 'demo-down', 'cancel sticks');
  await send(page, 'please fail');
  await expect(countdown(page)).toHaveText(/Retrying in \d s \(attempt 1\)/);
  await banner(page).getByRole('button', { name: 'Cancel' }).click();
  await expect(banner(page)).toContainText('Automatic retry cancelled — Retry now');
  await expect.poll(async () => (await runs(page, sid))[0].retry_dismissed_at ?? null).not.toBeNull();

  await page.reload();
  await hydrated(page);
  await expect(banner(page)).toContainText('Automatic retry cancelled — Retry now');
  await expect(countdown(page)).toHaveCount(0);
  await shot(page, 'operator-cancel-after-reload');
  await staysAt(page, sid, 1, 10_000);
  await expect(countdown(page)).toHaveCount(0);

  // Retry now still works: one new request.
  await banner(page).getByRole('button', { name: 'Retry now' }).click();
  await expect.poll(async () => (await runs(page, sid)).length).toBe(2);
});

test('cancel in one tab disarms the other tab at once', async ({ context }) => {
  const a = await context.newPage();
  const sid = await newSession(a, 'demo-down', 'cancel two tabs');
  const b = await context.newPage();
  await open(b, sid);
  await send(a, 'fail in both');
  await expect(countdown(a)).toHaveText(/Retrying in/);
  await expect(countdown(b)).toHaveText(/Retrying in/);
  await banner(a).getByRole('button', { name: 'Cancel' }).click();
  await expect(banner(b)).toContainText('Automatic retry cancelled — Retry now');
  await expect(countdown(b)).toHaveCount(0);
  await shot(b, 'operator-cancel-other-tab');
  // Longer than the 3 s countdown both tabs had.
  await staysAt(a, sid, 1, 5_000);
});

test('a reload mid-countdown resumes it from the time left, not from the start', async ({ page }) => {
  const sid = await newSession(page, 'demo-down', 'resume countdown');
  await send(page, 'count on');
  await expect(countdown(page)).toHaveText(/Retrying in 1 s \(attempt 1\)/);
  // Attempt 1 fails too; attempt 2 counts down 6 s from that failure.
  await expect(countdown(page)).toHaveText(/Retrying in [3-6] s \(attempt 2\)/, { timeout: 15_000 });
  await expect(countdown(page)).toHaveText(/Retrying in [23] s \(attempt 2\)/);
  await page.reload();
  await hydrated(page);
  await expect(countdown(page)).toBeVisible();
  const shown = Number((await countdown(page).textContent())!.match(/in (\d+) s \(attempt (\d+)\)/)![1]);
  const all = await runs(page, sid);
  const failed = all[all.length - 1];
  expect(failed.status).toBe('failed');
  const left = Math.ceil((failed.finished_at + 6_000 - Date.now()) / 1000);
  expect(shown).toBeLessThanOrEqual(Math.max(left, 0) + 1);
  expect(shown).toBeLessThan(5);
  await expect(countdown(page)).toContainText('(attempt 2)');
  await shot(page, 'operator-countdown-after-reload');
  await banner(page).getByRole('button', { name: 'Cancel' }).click();
});

test('Stop takes a realistic 120 ms press while a reply streams fast', async ({ page }) => {
  const sid = await newSession(page, 'demo-long', 'stop press');
  for (const [i, text] of ['first long one', 'second long one', 'third long one'].entries()) {
    await send(page, text);
    const reply = replies(page).nth(i);
    await expect(reply).toHaveClass(/streaming/);
    await expect(reply.locator('.content')).toContainText('You said');
    // The reply's own Stop (at its top), then the one docked by the composer, which stays
    // put however the conversation scrolls.
    const stop = (i === 0 ? reply : page.locator('.dock')).getByRole('button', { name: 'Stop' });
    await expect(stop).toBeVisible();
    const box = (await stop.boundingBox())!;
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.down();
    await page.waitForTimeout(120);
    await page.mouse.up();
    await expect.poll(async () => (await runs(page, sid))[i].status).toBe('cancelled');
    await expect(reply.locator('.tag')).toHaveText('Stopped');
  }
  await shot(page, 'operator-stop-press');
});

/** Holds a page's event stream back (it keeps the state it loaded), until released. */
async function freezeEvents(page: Page): Promise<() => Promise<void>> {
  const held: Route[] = [];
  const events = (url: URL) => url.pathname.endsWith('/events');
  await page.route(events, (route) => { held.push(route); });
  return async () => {
    await page.unroute(events);
    for (const r of held) await r.continue().catch(() => {});
  };
}

test('two tabs Regenerate a failed reply 100 ms apart: one provider request', async ({ browser, context }) => {
  const a = await context.newPage();
  const sid = await newSession(a, 'demo-auth', 'regenerate two tabs');
  await send(a, 'regenerate me');
  await expect(replies(a).last()).toHaveClass(/failed/, { timeout: 15_000 });
  const [failed] = await runs(a, sid);
  // In another browser: tabs of one browser share one event connection.
  const b = await otherBrowser(browser, { timezoneId: 'Asia/Kolkata' });
  const release = await freezeEvents(b);
  await open(b, sid);
  await expect(replies(b).last()).toHaveClass(/failed/);

  await replies(a).last().getByRole('button', { name: 'Regenerate' }).click();
  await b.waitForTimeout(100);
  await replies(b).last().getByRole('button', { name: 'Regenerate' }).click();
  await expect(b.locator('.notice')).toContainText('Already retried in another tab');
  // B follows the new run.
  const all = await runs(a, sid);
  expect(all.map((r: any) => r.kind)).toEqual(['prompt', 'regenerate']);
  await expect(replies(b)).toHaveCount(1);
  await expect(replies(b).last()).toHaveAttribute('data-run', all[1].id);
  await expect(replies(b).last()).not.toHaveAttribute('data-run', failed.id);
  await shot(b, 'operator-regenerate-stale');
  await release();
  await expect.poll(async () => (await runs(a, sid))[1].status).toBe('failed');
  const after = await runs(a, sid);
  expect(after.length).toBe(2);
  expect(after.reduce((n: number, r: any) => n + r.tier1_attempts, 0)).toBe(2);
  await b.context().close();
});

test('two tabs Regenerate a completed reply within the same second: one new run', async ({ browser, context }) => {
  const a = await context.newPage();
  const sid = await newSession(a, 'demo', 'regenerate completed');
  await send(a, 'answer me');
  await expect(replies(a).last()).not.toHaveClass(/streaming/, { timeout: 30_000 });
  await expect.poll(async () => (await runs(a, sid))[0].status).toBe('completed');
  // In another browser: tabs of one browser share one event connection.
  const b = await otherBrowser(browser, { timezoneId: 'Asia/Kolkata' });
  const release = await freezeEvents(b);
  await open(b, sid);
  await expect(replies(b).last().getByRole('button', { name: 'Regenerate' })).toBeVisible();
  await replies(a).last().getByRole('button', { name: 'Regenerate' }).click();
  await b.waitForTimeout(100);
  await replies(b).last().getByRole('button', { name: 'Regenerate' }).click();
  await expect(b.locator('.notice')).toContainText('Already retried in another tab');
  await shot(b, 'operator-regenerate-completed-stale');
  await release();
  await expect.poll(async () => (await runs(a, sid)).map((r: any) => r.status)).toEqual(['completed', 'completed']);
  expect((await runs(a, sid)).map((r: any) => r.kind)).toEqual(['prompt', 'regenerate']);
  await b.context().close();
});

for (const height of [720, 600]) {
  test(`15 sessions at 1280×${height}: lists scroll on their own, the banner stays in view`, async ({ page }) => {
    await page.setViewportSize({ width: 1280, height });
    await page.goto(printedUrl()); // signs the page's requests in
    for (let i = 0; i < 14; i++) {
      // A cookie-signed write names its origin, as the browser's own fetches do.
      const r = await page.request.post(`${origin()}/api/v1/sessions`, {
        headers: { Origin: origin() },
        data: { title: `filler ${height} ${i}`, model: i % 3 ? 'demo' : 'a-very-long-model-identifier-that-would-wrap-into-three-lines' },
      });
      expect(r.status()).toBe(201);
    }
    await newSession(page, 'demo-down', `banner ${height}`);
    for (const text of ['one', 'two', 'three']) {
      await send(page, `turn ${text}: a message long enough to take a couple of lines in the conversation view`);
      await expect(countdown(page)).toHaveText(/Retrying in/, { timeout: 15_000 });
    }
    await expect.poll(() => page.locator('.sessions li').count()).toBeGreaterThanOrEqual(15);
    const inView = async () => {
      const box = (await banner(page).boundingBox())!;
      return box.y >= 0 && box.y + box.height <= height;
    };
    expect(await inView()).toBe(true);
    await expect(banner(page).getByRole('button', { name: 'Cancel' })).toBeInViewport();
    // The page itself never scrolls; the list and the conversation do.
    const sizes = await page.evaluate(() => {
      const list = document.querySelector('.sessions')!;
      const chat = document.querySelector('.scroller')!;
      return {
        page: document.documentElement.scrollHeight - window.innerHeight,
        list: list.scrollHeight - list.clientHeight,
        chat: chat.scrollHeight - chat.clientHeight,
        scrolls: [list, chat].map((el) => getComputedStyle(el).overflowY),
      };
    });
    expect(sizes.page).toBeLessThanOrEqual(0);
    expect(sizes.list).toBeGreaterThan(0);
    // Each pane scrolls on its own when its content outgrows it.
    for (const overflow of sizes.scrolls) expect(['auto', 'scroll']).toContain(overflow);
    // Scrolled up to read, the banner is still there.
    await page.locator('.scroller').evaluate((el) => { el.scrollTop = 0; });
    expect(await inView()).toBe(true);
    await page.locator('.sessions').evaluate((el) => { el.scrollTop = el.scrollHeight; });
    expect(await inView()).toBe(true);
    // A long model id is cut with its full name in a tooltip.
    const model = page.locator('.sessions .model', { hasText: 'a-very-long' }).first();
    const h = (await model.boundingBox())!.height;
    expect(h).toBeLessThan(24);
    await expect(model).toHaveAttribute('title', 'a-very-long-model-identifier-that-would-wrap-into-three-lines');
    // The failing session stands out in the list and says when it last did something.
    const mine = page.locator('.sessions li', { hasText: `banner ${height}` });
    await expect(mine).toHaveClass(/retryable|failed|scheduled/);
    await expect(mine.locator('time.activity')).toHaveText(/^\d\d:\d\d$/);
    await shot(page, `operator-layout-${height}`);
    await banner(page).getByRole('button', { name: 'Cancel' }).click();
  });
}

test('times are local and dated when not today; classes read as words', async ({ page }) => {
  const sid = await newSession(page, 'demo-quota', 'local times');
  await send(page, 'quota please');
  await expect(countdown(page)).toContainText('retry after');
  const [failed] = await runs(page, sid);
  const until = failed.retry.retry_after_until;
  const { hhmm, today } = await page.evaluate((t) => {
    const d = new Date(t);
    return {
      hhmm: `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`,
      today: d.toDateString() === new Date().toDateString(),
    };
  }, until);
  // Past local midnight (the test's clock decides), the time carries its date: "Wed 2 Dec 00:29".
  const when = today ? hhmm : `[A-Z][a-z]{2} \\d{1,2} [A-Z][a-z]{2} ${hhmm}`;
  await expect(countdown(page)).toContainText(
    new RegExp(`Provider cooling down: retry after ${when} \\(in `),
  );
  await expect(banner(page)).not.toContainText('GMT');
  await expect(page.locator('.chat')).not.toContainText('GMT');
  const cls = replies(page).last().locator('.class');
  await expect(cls).toHaveText('Rate limited');
  await expect(cls).toHaveAttribute('title', /rate_limited/);
  await expect(banner(page).getByRole('button', { name: 'Clear cooldown' })).toHaveCount(1);
  await shot(page, 'operator-local-times');
  await banner(page).getByRole('button', { name: 'Cancel' }).click();
  await banner(page).getByRole('button', { name: 'Clear cooldown' }).click();
});
