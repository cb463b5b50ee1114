// TLS, API keys and CORS of `pagedserve serve` seen by an independent client: Node's own TLS
// stack and HTTP parser (node:https, trusting only a certificate made here with the `openssl`
// tool), not the Beast/Asio code the server is built on. A JSON completion, an SSE stream read
// as it arrives, a wrong CA refused, plain HTTP to the TLS port answered 400 without harm, a
// key in either header, and a CORS preflight without the key.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { startServer } from './server.mjs';

const KEY = 'node-tls-key';
const ORIGIN = 'https://app.example';
let dir;
let server;
let ca;

function makeCertificate(stem) {
  const cert = path.join(dir, `${stem}.crt`);
  const key = path.join(dir, `${stem}.key`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
    '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { stdio: 'ignore' });
  return { cert, key };
}

// One request; resolves with status, headers and the whole body.
function request(options, body = '') {
  const module = options.protocol === 'http:' ? http : https;
  return new Promise((resolve, reject) => {
    const req = module.request({ host: '127.0.0.1', port: server.port, servername: 'localhost', ...options },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => { text += chunk; });
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: text }));
        res.on('error', reject);
      });
    req.on('error', reject);
    req.end(body);
  });
}

function post(pathname, body, headers = { authorization: `Bearer ${KEY}` }) {
  const text = JSON.stringify(body);
  return request({ ca, method: 'POST', path: pathname,
    headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers } }, text);
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pagedserve-tls-'));
  const files = makeCertificate('server');
  ca = fs.readFileSync(files.cert);
  server = await startServer(['--ssl-certfile', files.cert, '--ssl-keyfile', files.key,
    '--api-key', KEY, '--allowed-origins', ORIGIN, '--log-interval', '0']);
});

after(async () => {
  await server?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('the server says it serves https', () => {
  assert.match(server.baseURL, /^https:\/\//);
});

test('a completion over HTTPS, key as Bearer or X-Api-Key', async () => {
  const body = { prompt: 'Once upon a time', max_tokens: 4, temperature: 0, ignore_eos: true };
  const bearer = await post('/v1/completions', body);
  assert.equal(bearer.status, 200, bearer.body);
  const parsed = JSON.parse(bearer.body);
  assert.equal(parsed.usage.completion_tokens, 4);
  const header = await post('/v1/completions', body, { 'x-api-key': KEY });
  assert.equal(header.status, 200, header.body);
  assert.equal(JSON.parse(header.body).choices[0].text, parsed.choices[0].text);  // greedy
  const none = await post('/v1/completions', body, {});
  assert.equal(none.status, 401);
  assert.equal(JSON.parse(none.body).error.code, 'invalid_api_key');
});

test('an SSE stream over HTTPS arrives event by event and ends with [DONE]', async () => {
  const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true, stream: true });
  const events = await new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port: server.port, servername: 'localhost', ca,
      method: 'POST', path: '/v1/completions',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' } }, (res) => {
      assert.equal(res.statusCode, 200);
      assert.match(res.headers['content-type'], /text\/event-stream/);
      const seen = [];
      let pending = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        pending += chunk;
        let end;
        while ((end = pending.indexOf('\n\n')) >= 0) {
          seen.push(pending.slice(0, end).replace(/^data: /, ''));
          pending = pending.slice(end + 2);
        }
      });
      res.on('end', () => resolve(seen));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
  assert.equal(events.at(-1), '[DONE]');
  const text = events.slice(0, -1).map((e) => JSON.parse(e).choices[0].text).join('');
  const whole = await post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true });
  assert.equal(text, JSON.parse(whole.body).choices[0].text);
});

test('a client that does not trust the certificate refuses the server', async () => {
  const other = fs.readFileSync(makeCertificate('other').cert);
  await assert.rejects(request({ ca: other, path: '/health' }), (err) => err.code === 'DEPTH_ZERO_SELF_SIGNED_CERT' || /self.signed|certificate/i.test(err.message));
});

test('plain HTTP to the TLS port gets 400 and the server keeps serving', async () => {
  const plain = await request({ protocol: 'http:', path: '/health' });
  assert.equal(plain.status, 400);
  assert.match(plain.body, /HTTPS/);
  const health = await request({ ca, path: '/health' });
  assert.equal(health.status, 200);
});

test('a CORS preflight needs no key; the origin is echoed only when allowed', async () => {
  const preflight = await request({ ca, method: 'OPTIONS', path: '/v1/chat/completions',
    headers: { origin: ORIGIN, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' } });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers['access-control-allow-origin'], ORIGIN);
  assert.match(preflight.headers['access-control-allow-headers'], /Authorization/);
  const models = await request({ ca, path: '/v1/models', headers: { origin: 'https://elsewhere.example', authorization: `Bearer ${KEY}` } });
  assert.equal(models.status, 200);
  assert.equal(models.headers['access-control-allow-origin'], undefined);
});
