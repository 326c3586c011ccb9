import { expect, Browser, BrowserContextOptions, Page, APIRequestContext } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { STATE } from '../global-setup';

export const printedUrl = (): string => JSON.parse(readFileSync(STATE, 'utf8')).url;
export const origin = (): string => new URL(printedUrl()).origin;

export async function hydrated(page: Page) {
  await expect(page.locator('html[data-hydrated="true"]')).toHaveCount(1);
}

/** Opens the app signed in and creates a session on `model`; answers its id. */
export async function newSession(page: Page, model: string, title = model): Promise<string> {
  await page.goto(printedUrl());
  await hydrated(page);
  await page.getByLabel('Title').fill(title);
  await page.getByLabel('Model').fill(model);
  await page.getByRole('button', { name: 'New session' }).click();
  await expect(page).toHaveURL(/\/s\/s_/);
  await expect(page.getByRole('heading', { name: title })).toBeVisible();
  return page.url().split('/s/')[1];
}

export async function send(page: Page, text: string) {
  const input = page.getByLabel('Message');
  await expect(input).toBeEnabled();
  await input.fill(text);
  await input.press('Enter');
  await expect(input).toHaveValue('');
}

/** The session's detail, from the API (a page's or context's cookie signs the request). */
export async function sessionDetail(request: APIRequestContext, sid: string): Promise<any> {
  const r = await request.get(`${origin()}/api/v1/sessions/${sid}`);
  expect(r.ok()).toBeTruthy();
  return r.json();
}

/** The session's runs, from the API (the page's cookie signs the request). */
export async function runs(page: Page, sid: string): Promise<any[]> {
  const r = await page.request.get(`${origin()}/api/v1/sessions/${sid}`);
  expect(r.ok()).toBeTruthy();
  return (await r.json()).runs;
}

export async function shot(page: Page, name: string) {
  await page.screenshot({ path: `test-results/${name}.png`, fullPage: true });
}

/** A signed-in page of another browser (a context of its own): it shares no event connection
 *  with this context's tabs, so it can be kept from hearing events. */
export async function otherBrowser(browser: Browser, options: BrowserContextOptions = {}): Promise<Page> {
  const page = await (await browser.newContext(options)).newPage();
  await page.goto(printedUrl());
  await hydrated(page);
  return page;
}
