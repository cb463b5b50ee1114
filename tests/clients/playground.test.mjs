// The playground page in a real browser: headless Chromium (Debian's `chromium`) driven by
// puppeteer-core against `pagedserve serve` on stories260K. The page loads without console
// errors; a prompt streams into the page token by token and the text equals /v1/completions'
// for the same seed; the stop button cancels and the blocks free; with n = 3 the block map
// shows the prompt's blocks with ref count 3 (and says so on hover), then every block free or
// cached; the same prompt again reuses cached blocks (prefix hits); chat mode; the API-key
// prompt. Screenshots go to $PAGEDSERVE_SCREENSHOT_DIR (default build/playground/).
// Skips (does not fail) only when no Chromium is installed; scripts/setup installs it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const chromium = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser']
  .filter(Boolean)
  .find((p) => existsSync(p));
const skip = chromium ? false : 'chromium is not installed (scripts/setup installs it)';
const shots = process.env.PAGEDSERVE_SCREENSHOT_DIR ?? path.resolve(here, '../../build/playground');

// A prompt of several full 16-token blocks, so that n samples share them.
const LONG_PROMPT =
  'Once upon a time there was a little girl named Lily. She loved to play outside in the park ' +
  'with her friends and her big brown dog. One day she found a shiny red ball under a tree.';

let server;
let browser;
let page;
const consoleErrors = [];

async function launch() {
  const puppeteer = (await import('puppeteer-core')).default;
  return puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // Root in a container: Chromium's sandbox needs user namespaces it does not get.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}

async function openPage(url, errors) {
  const p = await browser.newPage();
  await p.setViewport({ width: 1400, height: 1000 });
  p.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(msg.text());
  });
  p.on('pageerror', (err) => errors.push(String(err)));
  await p.goto(url, { waitUntil: 'load' });
  return p;
}

async function shot(name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`) });
}

async function setField(id, value) {
  await page.$eval(`#${id}`, (el, v) => {
    el.value = v;
  }, String(value));
}

async function settings(values) {
  const defaults = { temperature: 0.8, top_p: 0.95, top_k: -1, max_tokens: 40, n: 1, seed: '', stop_strings: '', schema: '' };
  for (const [id, value] of Object.entries({ ...defaults, ...values })) await setField(id, value);
}

// Sends `prompt` with the page's own form and returns the response's id.
async function sendPrompt(prompt) {
  const id = await page.evaluate(() => `r${window.playground.state.nextId}`);
  await setField('prompt', prompt);
  await page.click('#send');
  return id;
}

async function waitDone(id, timeout = 60000) {
  await page.waitForFunction((rid) => window.playground.state.responses.get(rid)?.done, { timeout }, id);
  return page.evaluate((rid) => {
    const r = window.playground.state.responses.get(rid);
    return {
      texts: r.choices.map((c) => c.text),
      finish: r.choices.map((c) => c.finish),
      tokens: r.choices.map((c) => c.tokens),
      spans: [...r.box.querySelectorAll('.choice[data-index="0"] .gen .tok')].length,
      domText: r.box.querySelector('.choice[data-index="0"] .gen').textContent,
      statsText: r.stats.textContent,
      usage: r.usage,
      error: r.error,
    };
  }, id);
}

const kvCounts = () => page.evaluate(() => window.playground.state.kv.counts());

before(async () => {
  if (skip) return;
  mkdirSync(shots, { recursive: true });
  server = await startServer(['--num-kv-blocks', '256', '--log-interval', '0']);
  browser = await launch();
  page = await openPage(`http://127.0.0.1:${server.port}/`, consoleErrors);
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test('the page loads, connects and shows the block map', { skip }, async () => {
  await page.waitForFunction(() => document.getElementById('conn').textContent === 'connected');
  await page.waitForFunction(() => window.playground.state.kv.frames >= 2);
  const pool = await page.evaluate(() => ({
    blocks: window.playground.state.kv.device.length,
    blockSize: window.playground.state.kv.blockSize,
    model: document.getElementById('model').textContent,
  }));
  assert.equal(pool.blocks, 256);
  assert.equal(pool.blockSize, 16);
  assert.match(pool.model, /stories260K/);
  await shot('loaded');
  assert.deepEqual(consoleErrors, []);
});

test('a completion streams into the page and equals /v1/completions', { skip }, async () => {
  await page.click('#mode-completion');
  await settings({ temperature: 0.8, seed: 7, max_tokens: 40 });
  const id = await sendPrompt('Once upon a time');
  const result = await waitDone(id);
  assert.equal(result.error, null);
  assert.ok(result.spans >= 5, `streamed in ${result.spans} pieces`);
  assert.equal(result.domText, result.texts[0]);
  assert.match(result.statsText, /TTFT \d+ ms/);
  assert.match(result.statsText, /tokens\/s/);

  const res = await fetch(`${server.baseURL}/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 40, temperature: 0.8, top_p: 0.95, top_k: -1, seed: 7 }),
  });
  const body = await res.json();
  assert.equal(result.texts[0], body.choices[0].text);

  // Hovering a token shows its logprob.
  const span = await page.$(`.msg[data-response="${id}"] .gen .tok:nth-child(3)`);
  await span.hover();
  const tip = await page.$eval('#tooltip', (el) => (el.hidden ? '' : el.textContent));
  assert.match(tip, /logprob -?\d+\.\d+/);
  await shot('completion');
  assert.deepEqual(consoleErrors, []);
});

test('the stop button cancels and the blocks free', { skip }, async () => {
  await settings({ temperature: 1.0, seed: 11, max_tokens: 440, n: 2 });
  // Send, then press Stop in the same task: stories260K writes 2 x 440 tokens faster than a
  // puppeteer click that waited for the first token lands on a quiet machine. The button's
  // handler sends the cancel frame right behind the request on the same socket.
  const id = await page.evaluate(() => `r${window.playground.state.nextId}`);
  await setField('prompt', 'Once upon a time');
  await page.evaluate(() => {
    document.querySelector('#send').click();
    document.querySelector('#stop').click();
  });
  const result = await waitDone(id);
  assert.ok(result.finish.includes('abort'), `finish reasons ${result.finish}, error ${result.error}`);
  await page.waitForFunction(() => window.playground.state.kv.counts().used === 0, { timeout: 10000 });
  assert.equal((await kvCounts()).used, 0);
  assert.deepEqual(consoleErrors, []);
});

test('n = 3 shares the prompt blocks (ref count 3), then every block is free or cached', { skip }, async () => {
  await settings({ temperature: 1.0, seed: 3, max_tokens: 300, n: 3 });
  // Polled every 10 ms: the samples share the prompt blocks for as long as they run. The map
  // is sampled every 100 ms and on a quiet machine stories260K can finish between two samples,
  // so a request whose sharing was never sampled is sent again (at most 8 times).
  let id;
  let found;
  for (let attempt = 0; attempt < 8 && !found; ++attempt) {
    id = await sendPrompt(LONG_PROMPT);
    found = await page
      .waitForFunction(
        (rid) => {
          const r = window.playground.state.responses.get(rid);
          const i = window.playground.state.kv.device.findIndex((b) => b.s === 'used' && b.r === 3);
          if (i < 0) return r?.done ? -1 : 0;
          // Freeze the picture for the hover check: stop applying frames until the test resumes.
          window.playground.paused = true;
          return i + 1;
        },
        { timeout: 30000, polling: 10 },
        id,
      )
      .then(async (handle) => ((await handle.jsonValue()) > 0 ? handle : undefined));
    if (!found) await waitDone(id);
  }
  assert.ok(found, 'no kv frame showed the prompt blocks shared by the 3 samples');
  const block = (await found.jsonValue()) - 1;
  // Hover the shared block: the tooltip names the count, the request and the hash.
  const where = await page.evaluate((i) => window.playground.deviceView.centerOf(i), block);
  await page.mouse.move(where.x, where.y);
  const tip = await page.$eval('#tooltip', (el) => (el.hidden ? '' : el.textContent));
  await shot('n3-shared');
  await page.evaluate(() => {
    window.playground.paused = false;
  });
  assert.match(tip, /ref count 3/);
  assert.match(tip, new RegExp(`owner ${id} \\(seq \\d+, \\d+, \\d+\\)`));
  assert.match(tip, /hash [0-9a-f]{12}/);
  await page.mouse.move(5, 5);
  const result = await waitDone(id);
  assert.deepEqual(result.finish.length, 3);
  await page.waitForFunction(() => window.playground.state.kv.counts().used === 0, { timeout: 10000 });
  const counts = await kvCounts();
  assert.equal(counts.used, 0);
  assert.equal(counts.free + counts.cached, 256);
  assert.ok(counts.cached > 0, 'the prompt blocks stay cached');
  await shot('n3-after');
  assert.deepEqual(consoleErrors, []);
});

test('the same prompt again reuses cached blocks (prefix hits)', { skip }, async () => {
  const before = await page.evaluate(() => ({
    cached: window.playground.state.kv.device.flatMap((b, i) => (b.s === 'cached' ? [i] : [])),
    hits: window.playground.state.kv.stats.prefix_hits_tokens,
  }));
  assert.ok(before.cached.length > 0);
  await settings({ temperature: 1.0, seed: 5, max_tokens: 300, n: 2 });
  // Every kv frame from now on, so a short request's frames are all looked at.
  await page.evaluate(() => {
    window.kvFrames = [];
    window.playground.state.ws.addEventListener('message', (e) => {
      const frame = JSON.parse(e.data);
      if (frame.type === 'kv') window.kvFrames.push(frame);
    });
  });
  // The map is sampled every 100 ms: a request that ran between two samples is sent again
  // (at most 8 times) until some frame shows it holding a block that was cached.
  let id;
  let result;
  let reused = false;
  for (let attempt = 0; attempt < 8 && !reused; ++attempt) {
    id = await sendPrompt(LONG_PROMPT);
    result = await waitDone(id);
    // Some frame showed a block that was cached now used by this request.
    reused = await page.evaluate(
      (cached, rid) =>
        window.kvFrames.some((frame) => {
          const mine = new Set(frame.seqs.filter((s) => s.id === rid).map((s) => s.seq));
          return frame.device.some((b) => cached.includes(b.i) && b.s === 'used' && b.o.some((s) => mine.has(s)));
        }),
      before.cached,
      id,
    );
  }
  await shot('prefix-reuse');
  assert.ok(reused, 'a cached block was taken by the new request');
  assert.ok(result.usage[0].prompt_tokens_details.cached_tokens > 0);
  assert.match(result.statsText, /prompt tokens from the prefix cache/);
  await page.waitForFunction((hits) => window.playground.state.kv.stats.prefix_hits_tokens > hits, {}, before.hits);
  assert.deepEqual(consoleErrors, []);
});

test('chat mode streams an answer and keeps the conversation', { skip }, async () => {
  await page.click('#mode-chat');
  await settings({ temperature: 0.7, seed: 2, max_tokens: 30 });
  const id = await sendPrompt('Tell me a story about a cat.');
  const result = await waitDone(id);
  assert.equal(result.error, null);
  assert.ok(result.tokens[0] > 0);
  const history = await page.evaluate(() => window.playground.state.history.map((m) => m.role));
  assert.deepEqual(history, ['user', 'assistant']);
  await shot('chat');
  assert.deepEqual(consoleErrors, []);
});

test('with --api-key the page asks for the key, then streams over the WebSocket', { skip }, async () => {
  const keyed = await startServer(['--num-kv-blocks', '64', '--log-interval', '0', '--api-key', 'sk-play']);
  const errors = [];
  try {
    const p = await openPage(`http://127.0.0.1:${keyed.port}/`, errors);
    await p.waitForSelector('#key-dialog[open]');
    await p.type('#key-input', 'sk-play');
    await p.click('#key-form button');
    await p.waitForFunction(() => document.getElementById('conn').textContent === 'connected');
    await p.waitForFunction(() => window.playground.state.kv.frames >= 1);
    const kvBlocks = await p.evaluate(() => window.playground.state.kv.device.length);
    assert.equal(kvBlocks, 64);
    await p.close();
  } finally {
    await keyed.stop();
  }
  // The only error is the browser's note of the first, keyless /v1/models (401).
  assert.ok(errors.every((e) => /401/.test(e)), errors.join('\n'));
});
