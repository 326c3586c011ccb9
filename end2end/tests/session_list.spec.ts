// Issue 37 item 6: a long session list. The page draws the newest 100 sessions, older ones a
// page at a time, and a search over titles; what it holds never grows by itself.
import { test, expect } from '@playwright/test';
import { hydrated, newSession, origin, printedUrl, send } from './helpers';

test('the list shows the newest 100, older ones on request, and finds a title', async ({ page }) => {
  await page.goto(printedUrl());
  await hydrated(page);
  const tag = `bulk${Date.now().toString(36)}`;
  for (let i = 0; i < 105; i++) {
    const r = await page.request.post(`${origin()}/api/v1/sessions`, {
      headers: { Origin: origin() },
      data: { title: `${tag} n${i}x`, model: 'demo' },
    });
    expect(r.status()).toBe(201);
  }
  await page.reload();
  await hydrated(page);
  const entries = page.locator('ul.sessions > li');
  await expect(entries).toHaveCount(100);
  // The newest first: the last one made heads the list.
  await expect(entries.first()).toContainText(`${tag} n104x`);
  const older = page.getByRole('button', { name: 'Show older sessions' });
  await older.click();
  await expect(entries).not.toHaveCount(100);
  await expect(page.locator('ul.sessions').getByText(`${tag} n0x`)).toHaveCount(1);
  // The 3-second refresh keeps what was shown, not one page of it.
  const shown = await entries.count();
  await page.waitForResponse(
    (r) => r.url().includes(`/api/v1/sessions?limit=${shown}`) && r.request().method() === 'GET',
    { timeout: 10_000 },
  );
  await expect(entries).toHaveCount(shown);

  // A search: every word, any case; cleared, the newest again.
  const search = page.getByLabel('Search sessions');
  await search.fill(`N7X ${tag}`);
  await expect(entries).toHaveCount(1);
  await expect(entries.first()).toContainText(`${tag} n7x`);
  await search.fill(`${tag} nothing-like-this`);
  await expect(entries).toHaveCount(0);
  await expect(page.getByText("No session's title has those words.")).toBeVisible();
  await search.fill('');
  await expect(entries).toHaveCount(100);
  await expect(entries.first()).toContainText(`${tag} n104x`);
});

test("a session's new state redraws its own entry in place, and no other", async ({ page }) => {
  await newSession(page, 'demo', 'entry in place');
  const entry = page.locator('ul.sessions > li', { has: page.locator('a.current') });
  await expect(entry).toHaveClass(/idle/);
  // Marked before the turn: an entry drawn anew (its element made again) loses its mark.
  const marks = await page.evaluate(() => {
    const all = [...document.querySelectorAll('ul.sessions > li')];
    all.forEach((li, i) => { (li as any).__mark = i + 1; });
    return all.length;
  });
  expect(marks).toBeGreaterThan(1);
  await send(page, 'hello there');
  await expect(entry).toHaveClass(/running/);
  await expect(entry).toHaveClass(/idle/, { timeout: 30_000 });
  await expect(entry.locator('.state')).toHaveText('idle');
  // The list's 3-second refresh has come and gone too.
  await page.waitForResponse((r) => r.url().includes('/api/v1/sessions?limit=') && r.request().method() === 'GET', { timeout: 10_000 });
  const kept = await page.evaluate(() =>
    [...document.querySelectorAll('ul.sessions > li')].map((li) => (li as any).__mark ?? 0));
  expect(kept.length).toBe(marks);
  expect(kept.every((m, i) => m === i + 1)).toBe(true);
});
