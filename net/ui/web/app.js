// The playground: chat and raw completions streamed over the WebSocket (/v1/stream), and the
// paged KV cache watched live through the "kv" topic. No build step, no network beyond this
// server. docs/playground.md says what it shows; docs/websocket-protocol.md has the frames.
import { KvModel, KvMapView, requestColor } from './kvmap.js';
import { Gauges } from './gauges.js';

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = 'pagedserve.apiKey';

const state = {
  mode: 'chat',
  apiKey: sessionStorage.getItem(KEY_STORAGE) ?? '',
  ws: null,
  nextId: 1,
  active: null, // the response streaming now
  responses: new Map(), // id -> response
  history: [], // chat messages so far
  kv: new KvModel(),
  kvPaused: false, // "pause map": frames wait (in order) until resumed
  kvPending: [],
  modelName: null,
};

const deviceView = new KvMapView($('device-map'), state.kv, 'device');
const cpuView = new KvMapView($('cpu-map'), state.kv, 'cpu', { maxHeight: 340, maxCell: 14 });
const gauges = new Gauges($('gauges'));

// ---- connection ----

function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

function authHeaders() {
  return state.apiKey ? { Authorization: `Bearer ${state.apiKey}` } : {};
}

function setConn(text, cls) {
  const el = $('conn');
  el.textContent = text;
  el.className = `pill ${cls ?? ''}`;
}

async function loadModel() {
  const res = await fetch('/v1/models', { headers: authHeaders() });
  if (res.status === 401) return false;
  const body = await res.json();
  state.modelName = body.data?.[0]?.id ?? null;
  $('model').textContent = state.modelName ? `model: ${state.modelName}` : '';
  return true;
}

function askForKey() {
  const dialog = $('key-dialog');
  $('key-input').value = state.apiKey;
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener(
      'close',
      () => {
        state.apiKey = $('key-input').value.trim();
        sessionStorage.setItem(KEY_STORAGE, state.apiKey);
        resolve();
      },
      { once: true },
    );
  });
}

function connect() {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  // A browser cannot set headers on a WebSocket: the key travels as a subprotocol.
  const protocols = state.apiKey ? ['pagedserve', `pagedserve.key.${base64url(state.apiKey)}`] : [];
  const ws = new WebSocket(`${scheme}://${location.host}/v1/stream`, protocols);
  state.ws = ws;
  setConn('connecting…');
  ws.addEventListener('open', () => {
    setConn('connected', 'ok');
    ws.send(JSON.stringify({ type: 'subscribe', topic: 'kv' }));
  });
  ws.addEventListener('message', (event) => onFrame(JSON.parse(event.data)));
  ws.addEventListener('close', () => {
    if (state.ws !== ws) return;
    setConn('disconnected: retrying', 'bad');
    if (state.active) finishResponse(state.active, 'connection lost');
    setTimeout(connect, 1500);
  });
}

function onFrame(frame) {
  if (frame.type === 'kv') return onKv(frame);
  const response = frame.id ? state.responses.get(frame.id) : null;
  if (frame.type === 'error' && !response) {
    console.warn('server error frame', frame.error);
    return;
  }
  if (!response) return;
  if (frame.type === 'token') onToken(response, frame);
  else if (frame.type === 'done') onDone(response, frame);
  else if (frame.type === 'error') onError(response, frame);
}

// ---- the KV map ----

function onKv(frame) {
  state.kvPending.push(frame);
  if (state.kvPaused) return;
  for (const f of state.kvPending.splice(0)) state.kv.apply(f);
  deviceView.draw();
  cpuView.draw();
  const c = state.kv.counts();
  const shown = deviceView.layout.shown;
  const total = state.kv.device.length;
  $('device-count').textContent =
    `${total} blocks × ${frame.block_size} tokens · ${c.used} used · ${c.cached} cached · ${c.free} free` +
    (shown < total ? ` · first ${shown} shown (the rest never used)` : '');
  const cpu = state.kv.counts(state.kv.cpu);
  $('cpu-count').textContent = state.kv.cpu.length
    ? `${state.kv.cpu.length} blocks · ${cpu.used} used`
    : 'none (serve with --swap-space)';
  $('kv-info').textContent = `v${frame.version}`;
  const requests = $('requests');
  requests.replaceChildren(
    ...state.kv.requests().map((r) => {
      const el = document.createElement('span');
      el.style.background = requestColor(r.request);
      el.textContent = `${r.label}: ${r.blocks} blocks`;
      return el;
    }),
  );
  gauges.update(frame.stats, frame.t_ms);
}

const tooltip = $('tooltip');
function showTooltip(text, x, y) {
  tooltip.textContent = text;
  tooltip.hidden = false;
  const pad = 14;
  const w = tooltip.offsetWidth;
  tooltip.style.left = `${Math.min(x + pad, window.innerWidth - w - 4)}px`;
  tooltip.style.top = `${y + pad}px`;
}
function hideTooltip() {
  tooltip.hidden = true;
}
for (const view of [deviceView, cpuView]) {
  view.canvas.addEventListener('mousemove', (e) => {
    const i = view.blockAt(e.clientX, e.clientY);
    if (i < 0) return hideTooltip();
    showTooltip(view.describe(i), e.clientX, e.clientY);
  });
  view.canvas.addEventListener('mouseleave', hideTooltip);
}
window.addEventListener('resize', () => {
  deviceView.draw();
  cpuView.draw();
});

// ---- requests ----

function readSettings() {
  const num = (id) => {
    const v = $(id).value.trim();
    return v === '' ? undefined : Number(v);
  };
  const settings = {
    temperature: num('temperature'),
    top_p: num('top_p'),
    top_k: num('top_k'),
    max_tokens: num('max_tokens'),
    n: num('n'),
    seed: num('seed'),
  };
  const stops = $('stop_strings').value.split(',').map((s) => s.trim()).filter(Boolean);
  if (stops.length) settings.stop = stops;
  const schemaText = $('schema').value.trim();
  if (schemaText) {
    settings.response_format = {
      type: 'json_schema',
      json_schema: { name: 'playground', schema: JSON.parse(schemaText) },
    };
  }
  for (const k of Object.keys(settings)) if (settings[k] === undefined) delete settings[k];
  return settings;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function send(promptText) {
  if (!state.ws || state.ws.readyState !== WebSocket.OPEN || state.active) return;
  let settings;
  try {
    settings = readSettings();
  } catch (err) {
    alertInline(`JSON schema: ${err.message}`);
    return;
  }
  const id = `r${state.nextId++}`;
  const n = settings.n ?? 1;
  const frame = { id, ...settings };
  const transcript = $('transcript');
  if (state.mode === 'chat') {
    state.history.push({ role: 'user', content: promptText });
    const user = el('div', 'msg user');
    user.append(el('div', 'who', 'you'), el('div', 'body', promptText));
    transcript.append(user);
    Object.assign(frame, { type: 'chat', messages: [...state.history], logprobs: true, top_logprobs: 3 });
  } else {
    Object.assign(frame, { type: 'completion', prompt: promptText, logprobs: 3 });
  }
  const box = el('div', 'msg assistant');
  box.dataset.response = id;
  box.append(el('div', 'who', state.mode === 'chat' ? 'model' : 'completion'));
  const choices = [];
  for (let i = 0; i < n; i += 1) {
    const choice = el('div', 'choice');
    choice.dataset.index = String(i);
    const body = el('div', 'body');
    if (state.mode === 'completion') body.append(el('span', 'prompt-text', promptText));
    const gen = el('span', 'gen');
    body.append(gen);
    const meta = el('div', 'meta', '');
    choice.append(body, meta);
    box.append(choice);
    choices.push({ gen, meta, text: '', tokens: 0, finish: null });
  }
  const stats = el('div', 'response-stats', 'waiting for the first token…');
  box.append(stats);
  transcript.append(box);
  transcript.scrollTop = transcript.scrollHeight;
  const response = { id, mode: state.mode, box, choices, stats, start: performance.now(), first: null, last: null, error: null, done: false, usage: [] };
  state.responses.set(id, response);
  state.active = response;
  $('send').disabled = true;
  $('stop').disabled = false;
  state.ws.send(JSON.stringify(frame));
}

function alertInline(text) {
  const note = el('div', 'msg', text);
  note.style.color = 'var(--danger)';
  $('transcript').append(note);
}

function onToken(response, frame) {
  const now = performance.now();
  if (response.first === null) response.first = now;
  response.last = now;
  const choice = response.choices[frame.index];
  if (!choice) return;
  choice.text += frame.text;
  choice.tokens += frame.token_ids.length;
  const span = el('span', 'tok', frame.text);
  span.dataset.tokenIds = frame.token_ids.join(',');
  if (frame.logprobs) {
    span.dataset.logprobs = frame.logprobs.map((v) => v.toFixed(3)).join(',');
    if (Math.min(...frame.logprobs) < -2.5) span.classList.add('low');
  }
  if (frame.top_logprobs) span.dataset.top = JSON.stringify(frame.top_logprobs);
  choice.gen.append(span);
  updateStats(response);
  const transcript = $('transcript');
  transcript.scrollTop = transcript.scrollHeight;
}

function describeToken(span) {
  const ids = span.dataset.tokenIds.split(',');
  const lps = span.dataset.logprobs ? span.dataset.logprobs.split(',').map(Number) : [];
  const lines = [`${JSON.stringify(span.textContent)} · ${ids.length} token${ids.length > 1 ? 's' : ''}`];
  ids.forEach((id, i) => {
    const lp = lps[i];
    lines.push(lp === undefined ? `token ${id}` : `token ${id} · logprob ${lp.toFixed(3)} · p ${(Math.exp(lp) * 100).toFixed(1)}%`);
  });
  if (span.dataset.top) {
    const top = JSON.parse(span.dataset.top);
    for (const candidates of top) {
      lines.push(`  top: ${candidates.map((c) => `${JSON.stringify(c.token)} ${c.logprob.toFixed(2)}`).join('  ')}`);
    }
  }
  return lines.join('\n');
}

$('transcript').addEventListener('mouseover', (e) => {
  const span = e.target.closest?.('.tok');
  if (span) showTooltip(describeToken(span), e.clientX, e.clientY);
});
$('transcript').addEventListener('mouseout', (e) => {
  if (e.target.closest?.('.tok')) hideTooltip();
});

function updateStats(response) {
  const tokens = response.choices.reduce((a, c) => a + c.tokens, 0);
  const parts = [];
  if (response.first !== null) parts.push(`TTFT <b>${(response.first - response.start).toFixed(0)} ms</b>`);
  const span = (response.last ?? 0) - (response.first ?? 0);
  if (tokens > 1 && span > 0) parts.push(`<b>${((1000 * (tokens - response.choices.length)) / span).toFixed(1)}</b> tokens/s`);
  parts.push(`${tokens} tokens`);
  const cached = response.usage.find((u) => u?.prompt_tokens_details)?.prompt_tokens_details.cached_tokens;
  if (cached !== undefined) parts.push(`${cached} prompt tokens from the prefix cache`);
  if (response.error) parts.push(`<span style="color:var(--danger)">${response.error}</span>`);
  response.stats.innerHTML = parts.join(' · ');
  response.tps = tokens > 1 && span > 0 ? (1000 * (tokens - response.choices.length)) / span : null;
  response.ttftMs = response.first === null ? null : response.first - response.start;
}

function onDone(response, frame) {
  const choice = response.choices[frame.index];
  if (!choice) return;
  choice.finish = frame.finish_reason;
  response.usage[frame.index] = frame.usage;
  choice.meta.textContent = `finish: ${frame.finish_reason} · ${frame.usage.completion_tokens} tokens`;
  if (response.choices.every((c) => c.finish)) finishResponse(response);
  else updateStats(response);
}

function onError(response, frame) {
  finishResponse(response, `${frame.error.code ?? frame.error.type}: ${frame.error.message}`);
}

function finishResponse(response, error) {
  response.done = true;
  if (error) response.error = error;
  updateStats(response);
  if (response.mode === 'chat' && !error && response.choices[0]) {
    state.history.push({ role: 'assistant', content: response.choices[0].text });
  }
  if (state.active === response) state.active = null;
  $('send').disabled = false;
  $('stop').disabled = true;
}

// ---- controls ----

$('prompt-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('prompt').value;
  if (!text.trim()) return;
  send(text);
  if (state.mode === 'chat') $('prompt').value = '';
});
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    $('prompt-form').requestSubmit();
  }
});
$('stop').addEventListener('click', () => {
  if (state.active) state.ws.send(JSON.stringify({ type: 'cancel', id: state.active.id }));
});
for (const tab of document.querySelectorAll('.tab')) {
  tab.addEventListener('click', () => {
    state.mode = tab.dataset.mode;
    for (const t of document.querySelectorAll('.tab')) t.classList.toggle('active', t === tab);
    $('prompt').placeholder = state.mode === 'chat' ? 'Tell me a story about a cat' : 'Once upon a time';
  });
}
$('clear').addEventListener('click', () => {
  state.history = [];
  $('transcript').replaceChildren();
});
function setKvPaused(paused) {
  state.kvPaused = paused;
  $('kv-pause').textContent = paused ? 'Resume map' : 'Pause map';
}
$('kv-pause').addEventListener('click', () => setKvPaused(!state.kvPaused));
$('key-button').addEventListener('click', async () => {
  await askForKey();
  await start();
});

async function start() {
  if (state.ws) {
    const old = state.ws;
    state.ws = null;
    old.close();
  }
  while (!(await loadModel())) await askForKey();
  connect();
}

// For tests and the curious: the page's own view of what it drew.
window.playground = {
  state,
  deviceView,
  cpuView,
  gauges,
  send,
  onFrame,
  get paused() {
    return state.kvPaused;
  },
  set paused(value) {
    setKvPaused(Boolean(value));
  },
};
start();
