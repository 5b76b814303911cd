// Vigil.load → batches → result() against dev/mock-collect.mjs, a collect server written with
// node:crypto (createECDH, hkdfSync, aes-256-gcm): the SDK's WebCrypto transport must open there.
// In Node the browser probes fail softly, which is itself under test: load must still succeed.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { beforeEach, test } from 'node:test';
import vm from 'node:vm';
import { createMockCollect, mockFetch } from '../dev/mock-collect.mjs';

// A window-like event target, so the interaction recorder has something to listen on.
const events = new EventTarget();
globalThis.addEventListener = events.addEventListener.bind(events);
globalThis.removeEventListener = events.removeEventListener.bind(events);
globalThis.dispatchEvent = events.dispatchEvent.bind(events);

const sdkUrl = new URL('../vigil.js', import.meta.url);
vm.runInThisContext(readFileSync(sdkUrl, 'utf8'), { filename: sdkUrl.pathname });
const { Vigil } = globalThis;

const ENDPOINT = 'https://collect.test';
let mock;
let calls;

beforeEach(() => {
  mock = createMockCollect();
  calls = [];
  globalThis.fetch = mockFetch(mock, calls);
});

const paths = () => mock.log.map((r) => `${r.method} ${r.path.replace(/(sid|png)_[0-9a-f]+/g, '$1_*')}`);

test('load opens the session, pings three times, sends the probes batch; result mints the handoff', async () => {
  const agent = await Vigil.load({ key: mock.key, endpoint: ENDPOINT + '/' });
  const s = mock.sessions.get(agent.sessionId);
  assert.ok(s, 'session exists on the server');

  const probes = s.batches.get(1);
  assert.equal(probes.kind, 'probes');
  assert.equal(typeof probes.collected_in_ms, 'number');
  assert.ok(Array.isArray(probes.timed_out));
  assert.ok(probes.collected_in_ms < 1000);
  assert.equal(probes.network.ping_rtts_ms.length, 3);
  for (const rtt of probes.network.ping_rtts_ms) assert.ok(rtt >= 0);
  // Every probe family reported: members present (null where Node lacks the browser API).
  for (const section of ['automation', 'browser', 'screen', 'locale', 'storage', 'integrity']) {
    assert.equal(typeof probes[section], 'object', section);
  }
  assert.ok('webdriver' in probes.automation);
  assert.ok(Array.isArray(probes.automation.globals));
  assert.equal(probes.locale.timezone, Intl.DateTimeFormat().resolvedOptions().timeZone);
  assert.equal(probes.storage.visitor_token, null);
  assert.deepEqual(probes.storage.token_found_in, []);

  // The session was opened with the contract's body; page_url is absent outside a page.
  assert.equal(s.opened.sdk_version, Vigil.version);
  assert.equal(Buffer.from(s.opened.client_public_key, 'base64url').length, 65);

  const { handoff, expiresAt, sessionId } = await agent.result();
  assert.match(handoff, /^vh1\.k1\./);
  assert.equal(sessionId, agent.sessionId);
  assert.ok(!Number.isNaN(Date.parse(expiresAt)));
  assert.equal(s.pingArrivals.length, 3);
  assert.deepEqual(s.pingArrivals.map((p) => p.id), s.pings, 'pings in the order given');
  assert.ok(s.networkChecked, 'network check called before results');
  assert.deepEqual(paths(), [
    'POST /v1/collect/sessions',
    'GET /v1/collect/pings/png_*', 'GET /v1/collect/pings/png_*', 'GET /v1/collect/pings/png_*',
    'POST /v1/collect/sessions/sid_*/batches',
    'POST /v1/collect/network-checks',
    'POST /v1/collect/sessions/sid_*/results',
  ]);
});

test('every request: Bearer publishable key, credentials omitted, JSON content type on bodies', async () => {
  const agent = await Vigil.load({ key: mock.key, endpoint: ENDPOINT });
  await agent.result();
  for (const { url, init } of calls) {
    assert.ok(url.startsWith(ENDPOINT + '/v1/collect/'), url);
    assert.equal(init.headers.Authorization, `Bearer ${mock.key}`);
    assert.equal(init.credentials, 'omit');
    if (init.method === 'POST') {
      assert.equal(init.headers['Content-Type'], 'application/json');
      assert.equal(typeof JSON.parse(init.body), 'object');
    } else {
      assert.equal(init.body, undefined);
    }
  }
});

test('interactions stream as later batches: types and timings, never key values', async () => {
  const agent = await Vigil.load({ key: mock.key, endpoint: ENDPOINT });
  const keydown = new Event('keydown');
  keydown.key = 'secret-letter';
  keydown.code = 'KeyS';
  globalThis.dispatchEvent(keydown);
  globalThis.dispatchEvent(new Event('keyup'));
  await agent.result(); // flushes pending interactions first
  const s = mock.sessions.get(agent.sessionId);
  const batch = s.batches.get(2);
  assert.equal(batch.kind, 'interactions');
  assert.deepEqual(batch.events.map((e) => e.type), ['keydown', 'keyup']);
  for (const e of batch.events) {
    assert.deepEqual(Object.keys(e).sort(), ['t', 'trusted', 'type']);
    assert.equal(e.trusted, false, 'a script-made event is not trusted');
    assert.ok(e.t >= batch.window_ms[0] && e.t <= batch.window_ms[1]);
  }
  assert.ok(!JSON.stringify(batch).includes('secret-letter'));
  const results = mock.log.findIndex((r) => r.path.endsWith('/results'));
  const second = mock.log.findIndex((r) => r.path.endsWith('/batches') && JSON.parse(r.body).seq === 2);
  assert.ok(second >= 0 && second < results, 'interactions batch lands before results');
});

test('server errors reject with the server error.code', async () => {
  mock.inject('POST', /\/v1\/collect\/sessions$/, 401, 'auth.invalid_credentials');
  await assert.rejects(Vigil.load({ key: mock.key, endpoint: ENDPOINT }),
    (e) => e.name === 'VigilError' && e.code === 'auth.invalid_credentials' && e.status === 401);

  mock.inject('POST', /\/batches$/, 422, 'collect.batch_invalid');
  await assert.rejects(Vigil.load({ key: mock.key, endpoint: ENDPOINT }), { code: 'collect.batch_invalid', status: 422 });

  mock.inject('GET', /\/pings\//, 410, 'collect.session_expired');
  await assert.rejects(Vigil.load({ key: mock.key, endpoint: ENDPOINT }), { code: 'collect.session_expired' });

  const agent = await Vigil.load({ key: mock.key, endpoint: ENDPOINT });
  mock.inject('POST', /\/results$/, 410, 'collect.session_expired');
  await assert.rejects(agent.result(), { code: 'collect.session_expired', status: 410 });
});

test('pings, the network check and results each prove the session with the next counter; batches do not', async () => {
  const agent = await Vigil.load({ key: mock.key, endpoint: ENDPOINT });
  await agent.result();
  const s = mock.sessions.get(agent.sessionId);
  // The mock verified each proof with node:crypto (HKDF + HMAC) and spent its counter.
  assert.deepEqual(s.proofs.map((p) => `${p.counter} ${p.method} ${p.path.replace(/(sid|png)_[0-9a-f]+/g, '$1_*')}`), [
    '1 GET /v1/collect/pings/png_*', '2 GET /v1/collect/pings/png_*', '3 GET /v1/collect/pings/png_*',
    '4 POST /v1/collect/network-checks',
    '5 POST /v1/collect/sessions/sid_*/results',
  ]);
  for (const { url, init } of calls) {
    const proof = init.headers['Vigil-Session-Proof'];
    if (/\/(sessions|batches)$/.test(url)) assert.equal(proof, undefined, url);
    else assert.match(proof, /^[1-9][0-9]*\.[A-Za-z0-9_-]{43}$/, url);
  }
});

test('a call whose proof the server refuses rejects with collect.session_proof_invalid, minting nothing', async () => {
  const agent = await Vigil.load({ key: mock.key, endpoint: ENDPOINT });
  const s = mock.sessions.get(agent.sessionId);
  s.proofKey = Buffer.alloc(32); // the server now expects another key than the one the SDK derived
  await assert.rejects(agent.result(), { code: 'collect.session_proof_invalid', status: 401 });
  assert.equal(s.results, 0);
});

test('proven calls leave one at a time in counter order, even when started together or after a failure', async () => {
  const { ProvenCalls } = Vigil._internal;
  const proofKey = await crypto.subtle.importKey('raw', new Uint8Array(32), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const seen = [];
  globalThis.fetch = async (url, init) => {
    const name = new URL(url).pathname.split('/').pop();
    const counter = init.headers['Vigil-Session-Proof'].split('.')[0];
    seen.push(`start ${name} ${counter}`);
    await new Promise((r) => setTimeout(r, name === 'network-checks' ? 40 : 0));
    seen.push(`end ${name}`);
    const failed = name === 'network-checks';
    return new Response(JSON.stringify(failed ? { error: { code: 'service.unavailable', retryable: true } } : { data: {} }),
      { status: failed ? 503 : 200 });
  };
  const proven = new ProvenCalls({ key: mock.key, endpoint: ENDPOINT }, 'sid_x', proofKey);
  const [check, results] = await Promise.allSettled([
    proven.request('POST', '/v1/collect/network-checks', { session_id: 'sid_x' }),
    proven.request('POST', '/v1/collect/sessions/sid_x/results', {}),
  ]);
  assert.equal(check.status, 'rejected');
  assert.equal(results.status, 'fulfilled');
  assert.deepEqual(seen, ['start network-checks 1', 'end network-checks', 'start results 2', 'end results']);
});

test('a lost acknowledgement is retried with the same ciphertext; 409 then counts as accepted', async () => {
  // The batch lands, but the client sees a 503: the retry resends the identical body, gets 409.
  const realHandle = mock.handle;
  let first = true;
  mock.handle = (method, path, headers, raw) => {
    const answer = realHandle(method, path, headers, raw);
    if (first && path.endsWith('/batches')) {
      first = false;
      return { status: 503, body: { error: { code: 'service.unavailable', retryable: true } } };
    }
    return answer;
  };
  const agent = await Vigil.load({ key: mock.key, endpoint: ENDPOINT });
  const bodies = mock.log.filter((r) => r.path.endsWith('/batches')).map((r) => r.body);
  assert.equal(bodies.length, 2);
  assert.equal(bodies[0], bodies[1], 'the same sealed batch, not a re-encryption under the same nonce');
  await agent.result();
});

test('load never throws synchronously and refuses bad options before any request', async () => {
  let promise;
  assert.doesNotThrow(() => { promise = Vigil.load(); });
  await assert.rejects(promise, { code: 'sdk.invalid_options' });
  await assert.rejects(Vigil.load({ key: 'pk_test_abc', endpoint: 'ftp://x' }), { code: 'sdk.invalid_options' });
  await assert.rejects(Vigil.load({ key: 'sk_test_abc', endpoint: 'ftp://x' }), { code: 'sdk.invalid_options' });
  await assert.rejects(Vigil.load({ key: 'pk_test_abc' }), { code: 'sdk.invalid_options' }, 'no endpoint, no script origin');
  assert.equal(calls.length, 0, 'nothing was sent');
});

test('a secret key is presented once on a browser route, so the server revokes it, and refused', async () => {
  globalThis.fetch = async (url, init) => {
    calls.push([url, init]);
    return new Response(JSON.stringify({ error: { code: 'auth.key_exposed', message: 'revoked', status: 401, retryable: false, request_id: 'req_x' } }),
      { status: 401, headers: { 'content-type': 'application/json' } });
  };
  await assert.rejects(Vigil.load({ key: 'sk_test_abc', endpoint: ENDPOINT }), { code: 'auth.key_exposed', status: 401 });
  assert.equal(calls.length, 1, 'one request, then nothing more');
  assert.equal(calls[0][0], ENDPOINT + '/v1/collect/sessions');
  assert.equal(calls[0][1].headers.Authorization, 'Bearer sk_test_abc');
});

test('an unreachable endpoint rejects with sdk.network_error', async () => {
  globalThis.fetch = async () => { throw new TypeError('fetch failed'); };
  await assert.rejects(Vigil.load({ key: mock.key, endpoint: ENDPOINT }), { code: 'sdk.network_error', retryable: true });
});

test('oversized interaction batches are split to fit max_batch_bytes', () => {
  const { splitToFit } = Vigil._internal;
  const events = Array.from({ length: 900 }, (_, i) => ({ t: i * 2.5, type: 'pointermove', x: 1000.25, y: 800.75, trusted: true }));
  const parts = splitToFit({ kind: 'interactions', window_ms: [0, 2500], events }, 16384);
  assert.ok(parts.length > 1);
  assert.deepEqual(parts.flatMap((p) => p.events), events);
  for (const p of parts) {
    const sealedBody = Math.ceil(((Buffer.byteLength(JSON.stringify(p)) + 16) * 4) / 3) + 40;
    assert.ok(sealedBody <= 16384, `${sealedBody}`);
  }
  assert.equal(parts[0].window_ms[0], 0);
  assert.equal(parts.at(-1).window_ms[1], 2500);
});

test('probes are time-boxed: a probe that outlives its budget is listed in timed_out, its members absent', async () => {
  const { collectProbes } = Vigil._internal;
  const slow = { name: 'slow', budgetMs: 20, members: ['rendering.audio_hash'], run: () => new Promise((r) => setTimeout(() => r({ 'rendering.audio_hash': 'late' }), 200)) };
  const broken = { name: 'broken', budgetMs: 20, members: ['screen.width'], run: async () => { throw new Error('no screen'); } };
  const quick = { name: 'quick', budgetMs: 20, members: ['locale.timezone'], run: async () => ({ 'locale.timezone': 'UTC' }) };
  const started = performance.now();
  const { observations, timedOut } = await collectProbes([slow, broken, quick], 150);
  assert.ok(performance.now() - started < 150);
  assert.deepEqual(timedOut, ['slow']);
  assert.equal(observations.rendering, undefined, 'timed-out member absent');
  assert.equal(observations.screen.width, null, 'failed probe reports null');
  assert.equal(observations.locale.timezone, 'UTC');
});
