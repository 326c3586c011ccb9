// B10, the browser's half: how much main-thread time the page spends per streamed delta.
//
// Run by `mulligan-bench --only b10` (which starts the fake provider and Mulligan and passes
// them here); prints one JSON line per measurement on stdout. Debian's chromium, driven by
// the end2end lockfile's Playwright through the DevTools protocol: `Performance.getMetrics`'
// `TaskDuration` (the renderer main thread's busy time) from just before the message is
// posted until the reply has stopped changing on screen.
//
// Usage: node b10.mjs <base-url> <token> <spec>…; a spec is a model `markdown-N-MS`,
// `markdown-N-MS:fill=K` to measure at the end of a session that first got K short turns
// (2·K messages), `markdown-N-MS:second` to measure the open page's second turn (after a
// short one), or `markdown-N-MS:sessions=K` to measure with K sessions in the list (made
// first, and kept: put it last). For a look inside: B10_PROFILE=<file> writes the renderer's JavaScript and
// WebAssembly self-time by function (and the callers of the busiest three),
// B10_TRACE=<file> its main-thread time by trace event
// (layout, paint, function calls), of the last spec measured, and B10_TRACE_RAW=<file> the
// main thread's trace events themselves (to read one frame whole). B10_JS_FLAGS=<flags> starts
// chromium with `--js-flags=<flags>` (`--no-wasm-lazy-compilation`: compile it all on load).
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', '..', 'end2end', 'package.json'));
const { chromium } = require('@playwright/test');

const [base, token, ...models] = process.argv.slice(2);
const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
const DEADLINE_MS = 180_000;
// The reply counts as drawn once nothing in it changed for this long.
const SETTLED_MS = 1500;

async function api(method, path, body) {
  const r = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: auth,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return JSON.parse(text);
}

// Resolves with Date.now() when the session's event stream says run `rid()` ended.
function runEnd(sid, rid) {
  const abort = new AbortController();
  const done = (async () => {
    const r = await fetch(`${base}/api/v1/sessions/${sid}/events`, {
      headers: auth,
      signal: abort.signal,
    });
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error('the event stream closed before the run ended');
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!frame.includes('event: run\n')) continue;
        const data = frame.split('\n').find((l) => l.startsWith('data: '));
        const run = JSON.parse(data.slice(6));
        if (run.id !== rid()) continue;
        if (['completed', 'failed', 'cancelled'].includes(run.status)) {
          const at = Date.now();
          abort.abort();
          if (run.status !== 'completed') throw new Error(`the run ended ${run.status}`);
          return at;
        }
      }
    }
  })();
  return { done, abort };
}

// The reply's DOM as a string: tags, attributes and text, comments (hydration markers) left
// out and neighbouring text nodes joined, so a streamed reply and a loaded one compare.
function shapeInPage() {
  const el = [...document.querySelectorAll('li.msg.agent .content')].pop();
  const walk = (n) => {
    let out = '';
    let text = '';
    for (const c of n.childNodes) {
      if (c.nodeType === 3) {
        text += c.data;
        continue;
      }
      if (c.nodeType !== 1) continue;
      out += text;
      text = '';
      const attrs = [...c.attributes]
        .filter((a) => !a.name.startsWith('data-'))
        .map((a) => ` ${a.name}="${a.value}"`)
        .sort()
        .join('');
      out += `<${c.localName}${attrs}>${walk(c)}</${c.localName}>`;
    }
    return out + text;
  };
  return el ? walk(el) : null;
}

// Posts `k` short prompts (the fake answers anything but `go` with `ok.`) and waits until
// every one's run has ended.
async function fill(sid, k) {
  for (let i = 0; i < k; i++) {
    await api('POST', `/sessions/${sid}/messages`, { content: `fill ${i}` });
  }
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const d = await api('GET', `/sessions/${sid}`);
    if (d.runs.length >= k && d.runs.every((r) => ['completed', 'failed', 'cancelled'].includes(r.status))) {
      return d.messages.length;
    }
    if (Date.now() > deadline) throw new Error(`the ${k} filling turns did not end`);
    await new Promise((ok) => setTimeout(ok, 250));
  }
}

// Makes `k` sessions, 16 requests at a time.
async function sessions(k) {
  let made = 0;
  const worker = async () => {
    while (made < k) {
      made++;
      await api('POST', '/sessions', { title: `b10 list ${made}`, model: 'demo' });
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  return made;
}

async function measure(browser, spec) {
  const [model, arg] = spec.split(':');
  const [what, count] = (arg || '').split('=');
  const n = Number(model.split('-')[1]);
  const listed = what === 'sessions' ? await sessions(Number(count)) : 0;
  const { id: sid } = await api('POST', '/sessions', { title: `b10 ${spec}`, model });
  const before = what === 'fill' ? await fill(sid, Number(count)) : 0;
  const first = await fetch(`${base}/s/${sid}`, { headers: auth });
  const html_bytes = (await first.arrayBuffer()).byteLength;
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}/?token=${token}`);
  const opening = Date.now();
  await page.goto(`${base}/s/${sid}`);
  await page.waitForSelector('html[data-hydrated="true"]', { timeout: 60_000 });
  const opened_ms = Date.now() - opening;
  // When anything in the chat last changed (epoch ms), watched from before the first send.
  await page.evaluate(() => {
    // The reply marked streaming, kept from the mutations that add it: a `querySelector`
    // per poll would walk the whole page, a cost of the bench (not of the page) that grows
    // with the session.
    window.__b10 = { last: 0, streaming: null };
    const inReply = (n) => {
      const e = n && (n.nodeType === 1 ? n : n.parentElement);
      return !!(e && e.closest('li.msg.agent'));
    };
    const STREAMING = 'li.msg.agent.streaming';
    new MutationObserver((records) => {
      for (const r of records) {
        if (r.type === 'attributes' && r.target.nodeType === 1 && r.target.matches(STREAMING)) {
          window.__b10.streaming = r.target;
        }
        for (const n of r.addedNodes) {
          if (n.nodeType !== 1) continue;
          const e = n.matches(STREAMING) ? n : n.querySelector(STREAMING);
          if (e) window.__b10.streaming = e;
        }
      }
      if (records.some((r) => inReply(r.target) || [...r.addedNodes].some(inReply))) {
        window.__b10.last = performance.timeOrigin + performance.now();
      }
    }).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  });
  if (what === 'second') {
    // The page's second turn: a short one first, so the code a turn runs is already
    // compiled (the browser compiles WebAssembly functions when they first run).
    await api('POST', `/sessions/${sid}/messages`, { content: 'first' });
    await settled(page, `${model} (its first turn)`);
    await page.evaluate(() => { window.__b10.last = 0; window.__b10.streaming = null; });
  }
  const cdp = await context.newCDPSession(page);
  await cdp.send('Performance.enable');
  const busy = async () => {
    const { metrics } = await cdp.send('Performance.getMetrics');
    return metrics.find((m) => m.name === 'TaskDuration').value;
  };
  let rid = null;
  const end = runEnd(sid, () => rid);
  await new Promise((ok) => setTimeout(ok, 200)); // (the stream above is open)
  const traced = [];
  if (process.env.B10_TRACE) {
    cdp.on('Tracing.dataCollected', (d) => traced.push(...d.value));
    await cdp.send('Tracing.start', { categories: 'devtools.timeline,disabled-by-default-devtools.timeline', transferMode: 'ReportEvents' });
  }
  if (process.env.B10_PROFILE) {
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.setSamplingInterval', { interval: 100 });
    await cdp.send('Profiler.start');
  }
  const busy0 = await busy();
  const sent = Date.now();
  const receipt = await api('POST', `/sessions/${sid}/messages`, { content: 'go' });
  rid = receipt.run_id;
  const ended = await Promise.race([
    end.done,
    new Promise((_, fail) => setTimeout(() => fail(new Error('the run did not end')), DEADLINE_MS)),
  ]);
  const last = await settled(page, model);
  const busy1 = await busy();
  if (process.env.B10_TRACE) {
    const done = new Promise((ok) => cdp.once('Tracing.tracingComplete', ok));
    await cdp.send('Tracing.end');
    await done;
    const by = new Map();
    const count = new Map();
    // The page's main thread only (other threads' and processes' tasks are not its time).
    const main = new Set(traced.filter((e) => e.ph === 'M' && e.name === 'thread_name' && e.args?.name === 'CrRendererMain').map((e) => `${e.pid}:${e.tid}`));
    for (const e of traced) {
      if (e.ph !== 'X' || !e.dur || !main.has(`${e.pid}:${e.tid}`)) continue;
      // An event's dispatch by its type (`message`, `animationFrame`, …): which work it is.
      const type = e.args?.data?.type ?? e.args?.data?.functionName;
      const name = type ? `${e.name}:${type}` : e.name;
      by.set(name, (by.get(name) || 0) + e.dur);
      count.set(name, (count.get(name) || 0) + 1);
    }
    const top = [...by.entries()].sort((a, b) => b[1] - a[1]).slice(0, 30);
    // (B10_TRACE_RAW=<file>: the main thread's events themselves, to read a frame whole.)
    if (process.env.B10_TRACE_RAW) {
      const raw = traced.filter((e) => main.has(`${e.pid}:${e.tid}`) && (e.ph === 'X' || e.ph === 'I'));
      (await import('node:fs')).writeFileSync(process.env.B10_TRACE_RAW, JSON.stringify(raw));
    }
    (await import('node:fs')).writeFileSync(process.env.B10_TRACE, top.map(([k, us]) => `${(us / 1000).toFixed(1)} ms  ×${count.get(k)}  ${k}`).join('\n') + '\n');
  }
  if (process.env.B10_PROFILE) {
    const { profile } = await cdp.send('Profiler.stop');
    const self = new Map();
    const dt = profile.timeDeltas;
    const byId = new Map(profile.nodes.map((n) => [n.id, n]));
    profile.samples.forEach((id, i) => {
      const n = byId.get(id);
      const key = `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.split('/').pop()}`;
      self.set(key, (self.get(key) || 0) + (dt[i] || 0));
    });
    const top = [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 40);
    // Where the busiest function is called from: the callers of its three costliest sample nodes.
    const parent = new Map();
    for (const n of profile.nodes) for (const c of n.children || []) parent.set(c, n.id);
    const perNode = new Map();
    profile.samples.forEach((id, i) => perNode.set(id, (perNode.get(id) || 0) + (dt[i] || 0)));
    // (B10_STACK_OF=<part of a name>: that function's instead.)
    const named = (id) => byId.get(id).callFrame.functionName;
    const want = process.env.B10_STACK_OF;
    const busiest = [...perNode.entries()]
      .filter(([id]) => (want ? named(id).includes(want) : !['(idle)', '(program)'].includes(named(id))))
      .sort((a, b) => b[1] - a[1])
      .slice(0, 3);
    const stack = [];
    for (const [top, us] of busiest) {
      stack.push(`${(us / 1000).toFixed(1)} ms:`);
      for (let id = top; id !== undefined; id = parent.get(id)) {
        stack.push(`  ${named(id) || '(anon)'}`);
      }
    }
    (await import("node:fs")).writeFileSync(process.env.B10_PROFILE, top.map(([k, us]) => `${(us / 1000).toFixed(1)} ms  ${k}`).join("\n") + `\nsamples ${profile.samples.length}\nthe three busiest samples' callers:\n${stack.join('\n')}\n`);
  }
  const streamed = await page.evaluate(shapeInPage);
  // The same reply drawn at once (rendered by the server, then hydrated) must be the same.
  await page.reload();
  await page.waitForSelector('html[data-hydrated="true"]', { timeout: 60_000 });
  const loaded = await page.evaluate(shapeInPage);
  await context.close();
  const same = streamed !== null && streamed === loaded;
  return {
    model: spec,
    messages_before: before,
    second_turn: what === 'second',
    sessions_listed: listed,
    html_bytes,
    opened_ms,
    deltas: n,
    stream_ms: ended - sent,
    on_screen_after_end_ms: Math.round(last - ended),
    main_thread_ms: Math.round((busy1 - busy0) * 1000),
    per_delta_us: Math.round(((busy1 - busy0) * 1e6) / n),
    same_as_loaded: same,
    chars: loaded ? loaded.length : 0,
  };
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
  args: [...(process.env.B10_JS_FLAGS ? [`--js-flags=${process.env.B10_JS_FLAGS}`] : []), '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
});
let failed = false;
for (const spec of models) {
  try {
    console.log(JSON.stringify(await measure(browser, spec)));
  } catch (e) {
    failed = true;
    console.log(JSON.stringify({ model: spec, error: String(e && e.message || e) }));
  }
}
await browser.close();
process.exit(failed ? 1 : 0);

/** Waits, with a deadline, until the reply is no longer marked streaming and nothing in it
 * changed for SETTLED_MS; answers when it last changed (epoch ms). The wait runs in the page
 * as one timer that sleeps until the reply could have settled: a poll from here every
 * 100 ms would be a task on the page's main thread each time, counted as the page's. */
async function settled(page, label) {
  const last = await page.evaluate(({ settle, deadlineMs }) => new Promise((ok) => {
    const deadline = performance.now() + deadlineMs;
    const check = () => {
      const b = window.__b10;
      const e = b.streaming;
      const streaming = !!(e && e.isConnected && e.classList.contains('streaming'));
      const now = performance.timeOrigin + performance.now();
      if (!streaming && b.last > 0 && now - b.last >= settle) return ok(b.last);
      if (performance.now() > deadline) return ok(null);
      // Not before the last change could be `settle` old (a change meanwhile: look again).
      const wait = b.last > 0 && !streaming ? b.last + settle - now : 100;
      setTimeout(check, Math.max(wait, 20));
    };
    check();
  }), { settle: SETTLED_MS, deadlineMs: DEADLINE_MS });
  if (last === null) throw new Error(`${label}: the reply did not settle on screen`);
  return last;
}
