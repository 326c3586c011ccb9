// Issue 36, the page for approval before a tool acts (CONTRACT §8): a waiting call's card and
// its three answers (by mouse and by keyboard), "always" remembered and forgotten, the
// session's approval mode, two tabs and a third that hears of the decision late, a reload,
// and every page's line and tab title counting the waiting calls. The demo model
// `demo-agent-writes` asks to rename its own session ("About: <the prompt's first words>").
import { test, expect, Page, APIRequestContext } from '@playwright/test';
import { hydrated, newSession, origin, otherBrowser, printedUrl, send, sessionDetail, shot } from './helpers';

const replies = (page: Page) => page.locator('li.msg.agent');
const call = (page: Page) => replies(page).last().locator('.tool-call[data-tool="rename_session"]');
const card = (page: Page) => call(page).locator('.approval-card');
const decided = (page: Page) => call(page).locator('.approval-decided');
const waitingLine = (page: Page) => page.getByRole('status', { name: 'Tool calls waiting' });
const TIME = '\\d\\d:\\d\\d';

/** Every call waiting on the server (other tests' too: the line counts them all). */
async function waiting(request: APIRequestContext): Promise<any[]> {
  const r = await request.get(`${origin()}/api/v1/approvals`);
  expect(r.ok()).toBeTruthy();
  return (await r.json()).approvals;
}

const countWords = (n: number) =>
  n === 1 ? '1 tool call waits for your approval' : `${n} tool calls wait for your approval`;

test('a waiting call shows its card, the list, the line and the title say so; Allow once runs it', async ({ context }) => {
  const page = await context.newPage();
  const sid = await newSession(page, 'demo-agent-writes', 'allow me');
  await send(page, 'plan the spring garden');

  // The card: what the tool is, its arguments, what its source says of it, three buttons.
  await expect(card(page)).toBeVisible();
  await expect(call(page)).toHaveAttribute('data-status', 'awaiting_approval');
  await expect(call(page).locator('.tool-status')).toHaveText('waiting for your approval');
  await expect(card(page).locator('.approval-tool')).toHaveText('mulligan/rename_session');
  await expect(card(page).locator('.approval-says')).toHaveText('may change things');
  await expect(card(page).locator('.approval-args pre')).toContainText('"title": "About: plan the spring garden"');
  for (const name of ['Allow once', 'Always allow rename_session here', 'Deny']) {
    await expect(card(page).getByRole('button', { name, exact: true })).toBeEnabled();
  }
  // Nothing ran: the title is as it was.
  await expect(page.getByRole('heading', { name: 'allow me' })).toBeVisible();
  expect((await sessionDetail(page.request, sid)).session.title).toBe('allow me');

  // The list marks the session; the line (with a link to it) and the tab's title count the
  // waiting calls, on this page and on any other.
  const entry = page.locator('.sessions li.session', { has: page.locator(`a[href="/s/${sid}"]`) });
  await expect(entry).toHaveClass(/needs-approval/);
  await expect(entry.locator('.state')).toHaveText('needs approval');
  const n = (await waiting(page.request)).length;
  expect(n).toBeGreaterThanOrEqual(1);
  await expect(waitingLine(page)).toContainText(countWords(n));
  await expect(waitingLine(page).locator(`a[href="/s/${sid}"]`)).toHaveText('allow me');
  await expect(page).toHaveTitle(`(${n}) allow me — Mulligan`);
  const home = await context.newPage();
  await home.goto(printedUrl());
  await hydrated(home);
  await expect(waitingLine(home)).toContainText(countWords(n));
  await expect(home).toHaveTitle(`(${n}) Mulligan`);
  // The line's link opens the session, with its card.
  await waitingLine(home).locator(`a[href="/s/${sid}"]`).click();
  await expect(home).toHaveURL(new RegExp(`/s/${sid}$`));
  await expect(card(home)).toBeVisible();
  await home.close();
  await shot(page, 'approval-card');

  // Allow once: the call runs, the reply says so, the card gives way to the decision.
  await card(page).getByRole('button', { name: 'Allow once' }).click();
  await expect(replies(page).last()).toContainText('Done: this session is now titled “About: plan the spring garden”.');
  await expect(call(page)).toHaveAttribute('data-status', 'ok');
  await expect(card(page)).toHaveCount(0);
  await expect(decided(page)).toHaveText(new RegExp(`^Allowed once · from this tab · ${TIME}$`));
  await expect(page.getByRole('heading', { name: 'About: plan the spring garden' })).toBeVisible();
  await expect(entry.locator('.state')).not.toHaveText('needs approval');
  await expect(waitingLine(page).locator(`a[href="/s/${sid}"]`)).toHaveCount(0);
  await expect(page).toHaveTitle(/^(\(\d+\) )?About: plan the spring garden — Mulligan$/);
  await expect.poll(async () => (await waiting(page.request)).length).toBe(n - 1);

  // The timeline says when it asked, what was decided, by whom, and how long it waited.
  await replies(page).last().locator('.timeline summary').click();
  await expect(replies(page).last().locator('.tl-row.asked')).toHaveText(
    /asked before rename_session \(mulligan\) · allowed once by page, this tab · waited \d/,
  );
  await shot(page, 'approval-allowed');
});

test('Deny by keyboard: Escape cancels, the reason goes to the model, the title stays', async ({ page }) => {
  const sid = await newSession(page, 'demo-agent-writes', 'deny me');
  await send(page, 'rename yourself please');
  await expect(card(page)).toBeVisible();

  // Reachable by Tab, pressed with Enter.
  const allow = card(page).getByRole('button', { name: 'Allow once' });
  const deny = card(page).getByRole('button', { name: 'Deny', exact: true });
  await allow.focus();
  await page.keyboard.press('Tab');
  await page.keyboard.press('Tab');
  await expect(deny).toBeFocused();
  await page.keyboard.press('Enter');
  const reason = card(page).getByLabel('Why (optional; the model is told)');
  await expect(reason).toBeFocused();
  await page.keyboard.press('Escape');
  await expect(reason).toHaveCount(0);
  await expect(deny).toBeFocused();
  await expect(call(page)).toHaveAttribute('data-status', 'awaiting_approval');

  await page.keyboard.press('Enter');
  await expect(reason).toBeFocused();
  await page.keyboard.type('keep the title as it is');
  await page.keyboard.press('Enter');
  await expect(replies(page).last()).toContainText('Understood: you declined the rename, so I left the title as it was.');
  await expect(call(page)).toHaveAttribute('data-status', 'denied');
  await expect(decided(page)).toHaveText(new RegExp(`^Denied: keep the title as it is · from this tab · ${TIME}$`));
  await expect(card(page)).toHaveCount(0);
  expect((await sessionDetail(page.request, sid)).session.title).toBe('deny me');
  await expect(page.getByRole('heading', { name: 'deny me' })).toBeVisible();
  await shot(page, 'approval-denied');
});

test('Always allow: the next call runs without a card; Forget and the approval mode', async ({ page }) => {
  const sid = await newSession(page, 'demo-agent-writes', 'always me');
  await send(page, 'first rename');
  await card(page).getByRole('button', { name: 'Always allow rename_session here' }).click();
  await expect(replies(page).last()).toContainText('Done: this session is now titled “About: first rename”.');
  await expect(decided(page)).toHaveText(new RegExp(`^Always allowed · from this tab · ${TIME}$`));
  // The header lists what the session remembers.
  const grant = page.locator('.approval-grant');
  await expect(grant).toContainText('Always allowed: mulligan/rename_session');

  // The next prompt's call runs at once.
  await send(page, 'second rename');
  await expect(replies(page)).toHaveCount(2);
  await expect(replies(page).last()).toContainText('Done: this session is now titled “About: second rename”.');
  await expect(call(page)).toHaveAttribute('data-status', 'ok');
  await expect(replies(page).last().locator('.approval-card')).toHaveCount(0);

  // Forget: the grant goes.
  await grant.getByRole('button', { name: 'Forget mulligan/rename_session' }).click();
  await expect(grant).toHaveCount(0);
  await expect.poll(async () => (await sessionDetail(page.request, sid)).session.tool_grants).toEqual([]);

  // Trust: the header says plainly that the session asks for nothing, and it does not.
  const mode = page.getByLabel('Approval');
  await expect(mode).toHaveValue('policy');
  await mode.selectOption('trust');
  await expect(page.locator('.approval-trust')).toHaveText(/asks for nothing/);
  await expect.poll(async () => (await sessionDetail(page.request, sid)).session.approval).toBe('trust');
  await send(page, 'third rename');
  await expect(replies(page)).toHaveCount(3);
  await expect(replies(page).last()).toContainText('Done: this session is now titled “About: third rename”.');
  await expect(replies(page).last().locator('.approval-card')).toHaveCount(0);
  await mode.selectOption('ask_all');
  await expect(page.locator('.approval-trust')).toHaveCount(0);
  await expect.poll(async () => (await sessionDetail(page.request, sid)).session.approval).toBe('ask_all');
});

test('ask_all: even a read-only call waits for a decision, and runs once allowed', async ({ page }) => {
  const sid = await newSession(page, 'demo-agent', 'ask for all');
  const mode = page.getByLabel('Approval');
  await mode.selectOption('ask_all');
  await expect.poll(async () => (await sessionDetail(page.request, sid)).session.approval).toBe('ask_all');
  await send(page, 'which sessions are there');
  // `list_sessions` reads only: under `policy` it runs unasked; here it asks.
  const listing = replies(page).last().locator('.tool-call[data-tool="list_sessions"]');
  const listingCard = listing.locator('.approval-card');
  await expect(listingCard).toBeVisible();
  await expect(listing).toHaveAttribute('data-status', 'awaiting_approval');
  expect((await waiting(page.request)).map((w) => w.session_id)).toContain(sid);
  await listingCard.getByRole('button', { name: 'Allow once' }).click();
  await expect(listing).toHaveAttribute('data-status', 'ok');
  await expect(listingCard).toHaveCount(0);
  await expect(replies(page).last()).not.toHaveClass(/streaming/);
  await expect.poll(async () => (await sessionDetail(page.request, sid)).runs.map((r: any) => r.status)).toEqual(['completed']);
});

test('two tabs: a decision in one shows in the other at once; a late tab hears the 409; a reload keeps the card', async ({ browser, context }) => {
  const page = await context.newPage();
  const sid = await newSession(page, 'demo-agent-writes', 'two tabs');
  await send(page, 'two tabs decide this');
  await expect(card(page)).toBeVisible();

  // A reload keeps the card (the wait is the server's, not the page's).
  await page.reload();
  await hydrated(page);
  await expect(card(page)).toBeVisible();
  await expect(card(page).getByRole('button', { name: 'Allow once' })).toBeEnabled();

  const other = await context.newPage();
  await other.goto(`${origin()}/s/${sid}`);
  await hydrated(other);
  await expect(card(other)).toBeVisible();
  // A third tab, in another browser, that hears no events: it still shows the card after
  // the others decided (tabs of one browser share one event connection).
  const late = await otherBrowser(browser);
  await late.route(/\/events\?/, (r) => r.abort());
  await late.goto(`${origin()}/s/${sid}`);
  await hydrated(late);
  await expect(card(late)).toBeVisible();

  // Decided in the other tab: this one shows it at once, from the `tool_call` event.
  await card(other).getByRole('button', { name: 'Allow once' }).click();
  await expect(decided(other)).toHaveText(new RegExp(`^Allowed once · from this tab · ${TIME}$`));
  await expect(card(page)).toHaveCount(0);
  await expect(decided(page)).toHaveText(new RegExp(`^Allowed once · from another tab · ${TIME}$`));
  await expect(replies(page).last()).toContainText('Done: this session is now titled “About: two tabs decide this”.');

  // The late tab's click is refused (409): it says so, and shows what was decided.
  await card(late).getByRole('button', { name: 'Deny', exact: true }).click();
  await late.keyboard.press('Enter');
  await expect(call(late).locator('.approval-error')).toContainText('already decided');
  await expect(card(late)).toHaveCount(0);
  await expect(decided(late)).toHaveText(new RegExp(`^Allowed once · from another tab · ${TIME}$`));
  await expect(late.getByRole('heading', { name: 'About: two tabs decide this' })).toBeVisible();
  await shot(late, 'approval-decided-elsewhere');
  await late.context().close();
});
