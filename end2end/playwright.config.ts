import { defineConfig } from '@playwright/test';

// Debian's chromium, never a downloaded browser. The server is started by global-setup.ts
// (which opens the URL that `mulligan serve` prints).
export default defineConfig({
  testDir: './tests',
  timeout: 60_000,
  expect: { timeout: 15_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [['list']],
  outputDir: 'test-results',
  globalSetup: './global-setup.ts',
  globalTeardown: './global-teardown.ts',
  use: {
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: [
        '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic',
        '--disable-background-networking', '--disable-component-update', '--disable-sync',
        '--no-first-run',
      ],
    },
  },
});
