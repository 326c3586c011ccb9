import { readFileSync, rmSync } from 'node:fs';
import { STATE } from './global-setup';

export default async function globalTeardown() {
  const { pid, dataDir } = JSON.parse(readFileSync(STATE, 'utf8'));
  try { process.kill(pid, 'SIGTERM'); } catch { /* already gone */ }
  await new Promise((r) => setTimeout(r, 500));
  rmSync(dataDir, { recursive: true, force: true });
}
