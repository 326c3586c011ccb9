// Starts `mulligan serve` on a free port with a fresh data dir and the demo provider, waits
// for the line it prints, and hands the printed URL (token included) to the tests.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createServer } from 'node:net';

// Beside this file, not in the machine's temp dir: two checkouts testing at once on one
// machine must not read each other's server.
export const STATE = join(__dirname, '.e2e-state.json');

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
    s.on('error', fail);
  });
}

export default async function globalSetup() {
  const root = resolve(__dirname, '..');
  const bin = process.env.MULLIGAN_BIN || join(root, 'target', 'release', 'mulligan');
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'mulligan-e2e-'));
  // One MCP tool server beside the built-in tools: the reference server `everything` (from
  // the lockfile's packages), whose long-running tool lets a test watch a call run.
  const mcpConfig = join(dataDir, 'mcp.json');
  writeFileSync(mcpConfig, JSON.stringify({
    mcpServers: { every: { command: join(root, 'end2end', 'node_modules', '.bin', 'mcp-server-everything') } },
  }));
  const child = spawn(bin, ['serve'], {
    cwd: root,
    env: {
      ...process.env,
      MULLIGAN_BIND: `127.0.0.1:${port}`,
      MULLIGAN_DATA_DIR: dataDir,
      MULLIGAN_PROVIDER: 'demo',
      MULLIGAN_MCP_CONFIG: mcpConfig,
      MULLIGAN_DEMO_DELTA_MS: process.env.MULLIGAN_DEMO_DELTA_MS || '30',
      // Fast Tier 1 backoff and a short Tier 2 countdown keep the suite quick.
      MULLIGAN_TIER1_BASE_MS: '100',
      MULLIGAN_TIER2_BASE_MS: '3000',
      LEPTOS_SITE_ROOT: join(root, 'target', 'site'),
      RUST_LOG: 'info',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url: string = await new Promise((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`mulligan printed no URL: ${out}`)), 30_000);
    child.stdout!.on('data', (chunk) => {
      out += chunk.toString();
      const m = out.match(/open (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
    child.on('exit', (code) => fail(new Error(`mulligan exited with ${code}: ${out}`)));
  });
  writeFileSync(STATE, JSON.stringify({ url, pid: child.pid, dataDir }));
  process.env.MULLIGAN_URL = url;
}
