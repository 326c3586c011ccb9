// Issue 55: a session whose turns run on an ACP agent recovers in the browser like any other.
// Its own `mulligan serve`, with the suite's scripted agent (end2end/acp/scripted_agent.py, on
// the official Python ACP SDK in the venv `scripts/test` makes for the ACP suite) in the
// catalogue: the agent's 529 fails the turn, Tier 2 counts down and its retry completes.
import { test, expect, Page } from '@playwright/test';
import { ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { hydrated } from './helpers';

const root = resolve(__dirname, '..', '..');
const python = join(root, 'target', 'acp-venv', 'bin', 'python');
const agent = join(root, 'end2end', 'acp', 'scripted_agent.py');

let server: ChildProcess | undefined;
let url = '';
let dir = '';

test.beforeAll(async () => {
  test.skip(!existsSync(python), 'the ACP venv is not made (scripts/test makes it before this suite)');
  dir = mkdtempSync(join(tmpdir(), 'mulligan-e2e-agent-'));
  writeFileSync(join(dir, 'providers.json'), JSON.stringify({
    providers: {
      scripted: { kind: 'acp', command: python, args: [agent], env: { AGENT_STATE: join(dir, 'agent') }, cwd: dir },
      demo: {},
    },
    default_model: 'scripted/default',
  }));
  const bin = process.env.MULLIGAN_BIN || join(root, 'target', 'release', 'mulligan');
  server = spawn(bin, ['serve'], {
    cwd: root,
    env: {
      ...process.env,
      MULLIGAN_BIND: '127.0.0.1:0',
      MULLIGAN_DATA_DIR: join(dir, 'data'),
      MULLIGAN_PROVIDERS: join(dir, 'providers.json'),
      MULLIGAN_TIER2_BASE_MS: '3000',
      LEPTOS_SITE_ROOT: join(root, 'target', 'site'),
      RUST_LOG: 'warn',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  url = await new Promise((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`mulligan printed no URL: ${out}`)), 30_000);
    server!.stdout!.on('data', (chunk) => {
      out += chunk.toString();
      const m = out.match(/open (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    server!.on('exit', (code) => fail(new Error(`mulligan exited with ${code}: ${out}`)));
  });
});

test.afterAll(async () => {
  server?.kill('SIGTERM');
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const agentLog = (): any[] => {
  const path = join(dir, 'agent', 'log.jsonl');
  return existsSync(path) ? readFileSync(path, 'utf8').trim().split('\n').map((l) => JSON.parse(l)) : [];
};

async function runsOf(page: Page, sid: string): Promise<any[]> {
  const r = await page.request.get(`${new URL(url).origin}/api/v1/sessions/${sid}`);
  expect(r.ok()).toBeTruthy();
  return (await r.json()).runs;
}

/** Opens this server's page, makes a session on the scripted agent and sends `prompt`. */
async function agentTurn(page: Page, title: string, prompt: string): Promise<string> {
  await page.goto(url);
  await hydrated(page);
  await page.getByLabel('Title').fill(title);
  await page.getByLabel('Model').fill('scripted/default');
  await page.getByRole('button', { name: 'New session' }).click();
  await expect(page).toHaveURL(/\/s\/s_/);
  const input = page.getByLabel('Message');
  await input.fill(prompt);
  await input.press('Enter');
  return page.url().split('/s/')[1];
}

test('an agent turn that fails overloaded counts down in the page and its retry completes', async ({ page }) => {
  const sid = await agentTurn(page, 'agent tier 2', 'overloaded 1');

  const banner = page.locator('.retry-banner');
  const countdown = banner.locator('.countdown');
  await expect(countdown).toHaveText(/Retrying in [23] s \(attempt 1\)/);
  await expect(banner).toContainText('overloaded');
  await expect(countdown).toHaveText(/Retrying in 1 s/);
  await expect(banner).toHaveCount(0, { timeout: 15_000 });
  const reply = page.locator('li.msg.agent').last();
  await expect(reply.locator('.content')).toHaveText('recovered after 1', { timeout: 30_000 });
  await expect(reply).not.toHaveClass(/streaming|failed/);
  const all = await runsOf(page, sid);
  expect(all.map((r: any) => r.status)).toEqual(['failed', 'completed']);
  expect(all[0].retry.retry_class).toBe('overloaded');
  // The retry asked the agent again in a fresh process, the prompt once more.
  const prompts = agentLog().filter((e) => e.method === 'session/prompt');
  expect(prompts.map((p) => p.prompt)).toEqual(['overloaded 1', 'overloaded 1']);
  expect(prompts[0].pid).not.toBe(prompts[1].pid);
});

test('a turn the agent ends short says why under its reply', async ({ page }) => {
  await agentTurn(page, 'agent stops', 'stop max_tokens');
  const reply = page.locator('li.msg.agent').last();
  await expect(reply.locator('.content')).toHaveText('stopping');
  await expect(reply.locator('p.served')).toHaveText('stopped: max_tokens');
  await expect(reply).not.toHaveClass(/streaming|failed/);
});
