// Issue 37, any number of tabs: one browser (one context), ten tabs, each on its own session.
// Over HTTP/1.1 a browser opens at most six connections per origin, so a stream per tab left
// the seventh tab hanging; the tabs now share one event connection, held by the tab that holds
// the Web Lock (`<html data-events="leader">`), and a new leader takes over when it closes.
import { test, expect, Page, Request } from '@playwright/test';
import { hydrated, origin, printedUrl, send } from './helpers';

const TABS = 10;
const reply = (page: Page) => page.locator('li.msg.agent').last();
const role = (page: Page) => page.locator('html').getAttribute('data-events');

test('ten tabs of one browser each follow their session; closing the leader leaves the rest live', async ({ context }) => {
  test.setTimeout(180_000);
  // Each page's own event-stream requests: a follower must make none.
  const streamsOf = new Map<Page, string[]>();
  const watch = (page: Page) => {
    const mine: string[] = [];
    streamsOf.set(page, mine);
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (u.pathname.endsWith('/events')) mine.push(u.pathname + u.search);
    });
    return page;
  };
  const first = watch(await context.newPage());
  await first.goto(printedUrl());
  await hydrated(first);
  const sids: string[] = [];
  for (let i = 0; i < TABS; i++) {
    const r = await first.request.post(`${origin()}/api/v1/sessions`, {
      headers: { Origin: origin() },
      data: { title: `tab ${i}`, model: 'demo' },
    });
    expect(r.status()).toBe(201);
    sids.push((await r.json()).id);
  }
  const streams: string[] = [];
  const onRequest = (r: Request) => {
    const u = new URL(r.url());
    if (u.pathname.endsWith('/events')) streams.push(u.pathname + u.search);
  };
  context.on('request', onRequest);

  // Each tab loads and hydrates (the seventh used to hang here), and shows its own reply.
  const tabs: Page[] = [];
  for (let i = 0; i < TABS; i++) {
    const page = i === 0 ? first : watch(await context.newPage());
    await page.goto(`${origin()}/s/${sids[i]}`);
    await hydrated(page);
    tabs.push(page);
  }
  for (let i = 0; i < TABS; i++) await send(tabs[i], `echo tab ${i} answers first`);
  for (let i = 0; i < TABS; i++) {
    await expect(reply(tabs[i])).toContainText(`tab ${i} answers first`);
    await expect(reply(tabs[i])).not.toHaveClass(/streaming/);
  }
  // One tab holds the connection; no tab opened a session's own stream.
  const roles = await Promise.all(tabs.map(role));
  expect(roles.filter((r) => r === 'leader')).toHaveLength(1);
  expect(roles.filter((r) => r === 'follower')).toHaveLength(TABS - 1);
  expect(streams.filter((s) => s.startsWith('/api/v1/sessions/'))).toEqual([]);
  for (let i = 0; i < TABS; i++) {
    const mine = streamsOf.get(tabs[i]) ?? [];
    if (roles[i] === 'follower') expect(mine, `tab ${i} follows`).toEqual([]);
    else expect(mine.length, `tab ${i} leads`).toBeGreaterThan(0);
  }
  // The last stream opened follows every tab's session.
  const last = decodeURIComponent(new URL(streams[streams.length - 1], origin()).searchParams.get('sessions') ?? '');
  expect(last.split(',').map((s) => s.split(':')[0]).sort()).toEqual([...sids].sort());

  // The leader closes: another tab takes over, and a reply started after the close (from
  // outside the page, so only the stream can bring it) shows in every tab left.
  const leader = roles.indexOf('leader');
  await tabs[leader].close();
  const rest = tabs.filter((_, i) => i !== leader);
  const restSids = sids.filter((_, i) => i !== leader);
  await expect.poll(async () => (await Promise.all(rest.map(role))).filter((r) => r === 'leader').length).toBe(1);
  for (let i = 0; i < rest.length; i++) {
    const r = await rest[i].request.post(`${origin()}/api/v1/sessions/${restSids[i]}/messages`, {
      headers: { Origin: origin() },
      data: { content: `echo after the close, session ${restSids[i]}` },
    });
    expect(r.status()).toBe(202);
  }
  for (let i = 0; i < rest.length; i++) {
    await expect(rest[i].locator('li.msg.agent')).toHaveCount(2);
    await expect(reply(rest[i])).toContainText(`after the close, session ${restSids[i]}`);
    await expect(reply(rest[i])).not.toHaveClass(/streaming/);
  }
  // Only the new leader opened a stream; the tabs that still follow opened none.
  const restRoles = await Promise.all(rest.map(role));
  for (let i = 0; i < rest.length; i++) {
    const mine = streamsOf.get(rest[i]) ?? [];
    if (restRoles[i] === 'follower') expect(mine, `tab ${i} still follows`).toEqual([]);
    else expect(mine.length, `tab ${i} took over`).toBeGreaterThan(0);
  }
  context.off('request', onRequest);
});
