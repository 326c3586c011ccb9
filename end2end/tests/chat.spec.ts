import { test, expect } from '@playwright/test';
import { hydrated, newSession, printedUrl, send } from './helpers';

test('open the printed URL, chat, watch the reply stream in, reload and find it kept', async ({ page }) => {
  const errors: string[] = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));

  // The printed URL carries the token; opening it sets the cookie and drops the token from the URL.
  await page.goto(printedUrl());
  await expect(page).not.toHaveURL(/token=/);
  await hydrated(page);

  await page.getByLabel('Title').fill('First chat');
  await page.getByRole('button', { name: 'New session' }).click();
  await expect(page).toHaveURL(/\/s\/s_/);
  await expect(page.getByRole('heading', { name: 'First chat' })).toBeVisible();

  const input = page.getByLabel('Message');
  await expect(input).toBeEnabled();
  await input.fill('Hello Mulligan');
  await input.press('Enter');
  await expect(input).toHaveValue('');

  const operator = page.locator('li.msg.operator').first();
  await expect(operator).toContainText('Hello Mulligan');
  // The reply streams: first it is partial and marked as being written, then complete.
  const reply = page.locator('li.msg.agent').first();
  await expect(reply).toHaveClass(/streaming/);
  await expect(reply.locator('.content')).toContainText('You said');
  const partial = (await reply.locator('.content').innerText()).length;
  await expect(reply).not.toHaveClass(/streaming/, { timeout: 30_000 });
  const full = await reply.locator('.content').innerText();
  expect(full.length).toBeGreaterThan(partial);
  expect(full).toContain('Hello Mulligan');
  await page.screenshot({ path: 'test-results/chat.png', fullPage: true });

  // The session list shows it, idle.
  await expect(page.locator('.sessions a.current')).toContainText('First chat');

  await page.reload();
  await hydrated(page);
  await expect(page.locator('li.msg.operator').first()).toContainText('Hello Mulligan');
  await expect(page.locator('li.msg.agent .content').first()).toHaveText(full);

  expect(errors).toEqual([]);
});

test('Shift+Enter adds a line instead of sending', async ({ page }) => {
  await page.goto(printedUrl());
  await hydrated(page);
  await page.getByRole('button', { name: 'New session' }).click();
  await expect(page).toHaveURL(/\/s\/s_/);
  const input = page.getByLabel('Message');
  await expect(input).toBeEnabled();
  await input.fill('line one');
  await input.press('Shift+Enter');
  await input.type('line two');
  await expect(input).toHaveValue('line one\nline two');
  await expect(page.locator('li.msg')).toHaveCount(0);
  await page.getByRole('button', { name: 'Send' }).click();
  await expect(page.locator('li.msg.operator .content')).toHaveText('line one\nline two');
});

// A hidden tab gets no animation frames: its streaming reply is drawn by a timer instead.
test('a tab that gets no animation frames still draws a streaming reply', async ({ page }) => {
  await page.addInitScript(() => {
    (window as any).__frames = 0;
    window.requestAnimationFrame = () => {
      (window as any).__frames++;
      return 0;
    };
  });
  await newSession(page, 'demo', 'no frames');
  const words = Array.from({ length: 60 }, (_, i) => `w${i}`).join(' ');
  await send(page, `echo ${words}`);
  // Drawn while it streams, not only when the finished message replaces it.
  await expect(page.locator('li.msg.agent.streaming')).toContainText('w1 ', { timeout: 20_000 });
  const reply = page.locator('li.msg.agent').last();
  await expect(reply).not.toHaveClass(/streaming/, { timeout: 20_000 });
  await expect(reply).toContainText(words);
  // The page did ask for frames (none came).
  expect(await page.evaluate(() => (window as any).__frames)).toBeGreaterThan(0);
});

// A streaming reply taller than the pane is followed to its end, unless the operator scrolls
// up to read: then the view stays where they put it while the text goes on, and scrolling
// back down to the end follows it again.
test('the conversation follows a streaming reply, and stays where the operator scrolls to', async ({ page }) => {
  await newSession(page, 'demo', 'follow the end');
  const text = Array.from({ length: 240 }, (_, i) => `para${i}`).join(' \n\n');
  await send(page, `echo ${text}`);
  const scroller = page.locator('.scroller');
  const reply = page.locator('li.msg.agent').last();
  const gap = () => scroller.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight);
  const top = () => scroller.evaluate((el) => el.scrollTop);
  const written = () => reply.evaluate((el) => (el.textContent || '').length);
  // Once the reply outgrows the pane, its end stays in view while it streams.
  await expect.poll(() => scroller.evaluate((el) => el.scrollHeight - el.clientHeight), { timeout: 20_000 }).toBeGreaterThan(600);
  await expect(reply).toHaveClass(/streaming/);
  await expect.poll(gap).toBeLessThan(80);
  // The operator scrolls up to read: the view stays there while more text comes.
  await scroller.hover();
  await page.mouse.wheel(0, -100_000);
  await expect.poll(top).toBe(0);
  const at = await written();
  await expect.poll(written).toBeGreaterThan(at + 60);
  await expect(reply).toHaveClass(/streaming/);
  expect(await top()).toBe(0);
  // Back at the end (at once, as the End key or the scrollbar puts it: a wheel's smooth
  // scroll lands where the end was when it started), the view follows it again.
  await scroller.evaluate((el) => { el.scrollTop = el.scrollHeight; });
  await expect.poll(gap).toBeLessThan(80);
  const back = await written();
  await expect.poll(written).toBeGreaterThan(back + 60);
  await expect.poll(gap).toBeLessThan(80);
  await expect(reply).not.toHaveClass(/streaming/, { timeout: 30_000 });
  await expect(reply).toContainText('para239');
  await expect.poll(gap).toBeLessThan(80);
});
