import { test, expect, Page } from '@playwright/test';
import { hydrated, newSession, origin, printedUrl, send, shot } from './helpers';

/** Creates `n` sessions over the API (the page's cookie signs them); answers their titles. */
async function createSessions(page: Page, n: number, tag: string): Promise<string[]> {
  const titles: string[] = [];
  for (let i = 0; i < n; i++) {
    const title = `${tag} ${String(i).padStart(2, '0')}`;
    const r = await page.request.post(`${origin()}/api/v1/sessions`, {
      headers: { Origin: origin() },
      data: { title, model: 'demo' },
    });
    expect(r.status()).toBe(201);
    titles.push(title);
  }
  return titles;
}

/** Waits, with a deadline, until the session's last run has completed. */
async function settled(page: Page, sid: string) {
  await expect
    .poll(async () => {
      const r = await page.request.get(`${origin()}/api/v1/sessions/${sid}`);
      return (await r.json()).runs.map((x: any) => x.status);
    }, { timeout: 30_000 })
    .toEqual(['completed']);
}

test('with JavaScript off, the first HTML holds 50 sessions and the open session', async ({ page, browser }) => {
  await page.goto(printedUrl());
  const titles = await createSessions(page, 49, 'no-js list');
  const sid = await newSession(page, 'demo', 'no-js chat');
  await send(page, 'tell me something the server renders');
  await settled(page, sid);
  const reply = (await (await page.request.get(`${origin()}/api/v1/sessions/${sid}`)).json())
    .messages.find((m: any) => m.role === 'agent').content as string;
  expect(reply.length).toBeGreaterThan(0);

  const plain = await browser.newContext({ javaScriptEnabled: false });
  const noJs = await plain.newPage();
  await noJs.goto(printedUrl()); // sets the cookie and redirects: no script needed
  // Every one of the 50 is in the list the server wrote, and nothing ran in the page.
  for (const title of [...titles, 'no-js chat']) {
    await expect(noJs.locator('.sessions li', { hasText: title })).toHaveCount(1);
  }
  await expect(noJs.locator('.sidebar')).not.toContainText('No sessions yet.');
  await expect(noJs.locator('html[data-hydrated]')).toHaveCount(0);

  await noJs.goto(`${origin()}/s/${sid}`);
  await expect(noJs.getByRole('heading', { name: 'no-js chat' })).toBeVisible();
  await expect(noJs).toHaveTitle('no-js chat — Mulligan');
  await expect(noJs.locator('.messages')).toContainText('tell me something the server renders');
  await expect(noJs.locator('.messages')).toContainText(reply.slice(0, 40));
  await expect(noJs.locator('.sessions li.session a[aria-current="page"]')).toContainText('no-js chat');
  await shot(noJs, 'page-no-js-session');
  await plain.close();
});

test('signed out, the page says how to sign in and shows no session', async ({ browser }) => {
  const plain = await browser.newContext({ javaScriptEnabled: false });
  const page = await plain.newPage();
  await page.goto(origin());
  await expect(page.locator('.sidebar [role="alert"]')).toContainText('Not signed in');
  await expect(page.locator('.sessions li')).toHaveCount(0);
  await plain.close();
});

test('the page hydrates from the HTML: no second read, live from the snapshot on', async ({ page }) => {
  // Markup in a title is text, in the page and in the data the page carries for hydration.
  const title = 'hydrates </script><b>bold</b>';
  const sid = await newSession(page, 'demo', title);
  await send(page, 'first turn');
  await settled(page, sid);
  const requests: string[] = [];
  const paths: string[] = [];
  const listReads: number[] = [];
  const problems: string[] = [];
  page.on('request', (r) => {
    const url = new URL(r.url());
    const u = url.pathname + url.search;
    requests.push(u);
    paths.push(url.pathname);
    // The list is read with its page's size (`?limit=`): count every read of it.
    if (url.pathname === '/api/v1/sessions') listReads.push(Date.now());
  });
  page.on('pageerror', (e) => problems.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  await page.goto(`${origin()}/s/${sid}`);
  await hydrated(page);
  const hydratedAt = Date.now();
  await expect(page.locator('.messages')).toContainText('first turn');
  await expect(page.locator('.chat-head h1')).toHaveText(title);
  await expect(page).toHaveTitle(`${title} — Mulligan`);
  await expect(page.locator('.chat b')).toHaveCount(0);
  // The stream resumes from the snapshot in the HTML; the list and the session are not read again.
  const follows = (u: string) => u.startsWith('/api/v1/events?sessions=') && decodeURIComponent(u).startsWith(`/api/v1/events?sessions=${sid}:`);
  await expect.poll(() => requests.filter(follows).length).toBe(1);
  // Whatever its query: the session is not read again.
  expect(paths.filter((p) => p === `/api/v1/sessions/${sid}`)).toEqual([]);
  // The list refreshes every 3 s once hydrated; a read at hydration would come at once.
  expect(listReads.filter((t) => t < hydratedAt + 1000)).toEqual([]);
  // Hydrated, it is live: a new turn streams in without a reload.
  await send(page, 'second turn');
  await expect(page.locator('.messages li')).toHaveCount(4, { timeout: 20_000 });
  await expect.poll(async () => (await (await page.request.get(`${origin()}/api/v1/sessions/${sid}`)).json()).runs.map((x: any) => x.status)).toEqual(['completed', 'completed']);
  expect(problems).toEqual([]);
});

test('moving between sessions in the list shows each one, live, with no page error', async ({ page }) => {
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  const a = await newSession(page, 'demo', 'nav first');
  await send(page, 'first of nav');
  await settled(page, a);
  const b = await newSession(page, 'demo', 'nav second');
  await send(page, 'second of nav');
  await settled(page, b);
  // Moving happens in the page: a reload would drop this marker.
  await page.evaluate(() => { (window as any).stayed = true; });
  for (const [title, text, other] of [
    ['nav first', 'first of nav', 'second of nav'],
    ['nav second', 'second of nav', 'first of nav'],
    ['nav first', 'first of nav', 'second of nav'],
  ]) {
    await page.locator('.sessions a', { hasText: title }).click();
    await expect(page.getByRole('heading', { name: title })).toBeVisible();
    await expect(page.locator('.messages')).toContainText(text);
    await expect(page.locator('.messages')).not.toContainText(other);
    // The tab is titled after the open session, for an operator with several tabs.
    await expect(page).toHaveTitle(`${title} — Mulligan`);
  }
  await expect(page).toHaveURL(`${origin()}/s/${a}`);
  await expect(page.locator('.sessions a[aria-current="page"]')).toHaveText(/nav first/);
  // The history's back and forward move between them too, and the brand leads home.
  await page.goBack();
  await expect(page).toHaveURL(`${origin()}/s/${b}`);
  await expect(page.getByRole('heading', { name: 'nav second' })).toBeVisible();
  await expect(page.locator('.sessions a[aria-current="page"]')).toHaveText(/nav second/);
  await page.goForward();
  await expect(page.getByRole('heading', { name: 'nav first' })).toBeVisible();
  await page.locator('.brand a').click();
  await expect(page).toHaveURL(`${origin()}/`);
  await expect(page.locator('.welcome')).toBeVisible();
  await expect(page.locator('.sessions a[aria-current="page"]')).toHaveCount(0);
  await expect(page).toHaveTitle('Mulligan');
  await page.goBack();
  await expect(page.getByRole('heading', { name: 'nav first' })).toBeVisible();
  expect(await page.evaluate(() => (window as any).stayed)).toBe(true);
  // The session moved to follows live: a new turn streams in without a reload.
  await send(page, 'after moving');
  await expect(page.locator('.messages li')).toHaveCount(4, { timeout: 20_000 });
  expect(problems).toEqual([]);
});

test('a link to a page of the app keeps its query and hash, without a reload', async ({ page }) => {
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(e.message));
  const sid = await newSession(page, 'demo', 'kept address');
  await page.locator('.brand a').click();
  await expect(page.locator('.welcome')).toBeVisible();
  await page.evaluate(() => { (window as any).stayed = true; });
  // A link as an operator might paste one: to a session, with a query and a hash.
  await page.evaluate((href) => {
    const a = document.createElement('a');
    a.href = href;
    a.id = 'pasted';
    a.textContent = 'pasted link';
    document.body.appendChild(a);
  }, `/s/${sid}?from=notes#latest`);
  await page.locator('#pasted').click();
  await expect(page.getByRole('heading', { name: 'kept address' })).toBeVisible();
  await expect(page).toHaveURL(`${origin()}/s/${sid}?from=notes#latest`);
  await expect(page.locator('.sessions a[aria-current="page"]')).toHaveText(/kept address/);
  expect(await page.evaluate(() => (window as any).stayed)).toBe(true);
  expect(problems).toEqual([]);
});

test('an address that is no page says so, and its links still lead home', async ({ page }) => {
  await page.goto(printedUrl());
  await hydrated(page);
  await page.goto(`${origin()}/s/nothing/here`);
  await hydrated(page);
  await expect(page.locator('.main')).toContainText('Nothing here.');
  // The session route, with what cannot be a session's id.
  await page.goto(`${origin()}/s/not%20an%20id`);
  await hydrated(page);
  await expect(page.locator('.main')).toContainText('Nothing here.');
  await expect(page.locator('.chat')).toHaveCount(0);
  await page.locator('.brand a').click();
  await expect(page.locator('.welcome')).toBeVisible();
});

test('times the server wrote in UTC are redrawn in the browser\'s time zone', async ({ browser }) => {
  // Half an hour off any whole-hour zone: a time left in UTC cannot match by chance.
  const ctx = await browser.newContext({ timezoneId: 'Asia/Kolkata' });
  const page = await ctx.newPage();
  await page.goto(printedUrl());
  const r = await page.request.post(`${origin()}/api/v1/sessions`, {
    headers: { Origin: origin() },
    data: { title: 'kolkata time', model: 'demo' },
  });
  const created = (await r.json()).created_at as number;
  await page.reload();
  await hydrated(page);
  const local = await page.evaluate((t) => {
    const d = new Date(t);
    return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
  }, created);
  const utc = new Date(created).toISOString().slice(11, 16);
  expect(local).not.toBe(utc);
  const time = page.locator('.sessions li', { hasText: 'kolkata time' }).locator('time.activity');
  await expect(time).toHaveText(local);
  await ctx.close();
});
