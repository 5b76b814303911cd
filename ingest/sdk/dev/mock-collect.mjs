// A stand-in for the ingest edge's collect API (schemas/collect.md), written with node:crypto so
// that it checks the SDK against a second implementation of the transport. Used two ways:
//   - in process, as a fetch() replacement (test/protocol.test.mjs);
//   - as a real HTTP + WebSocket server with CORS, serving the SDK and a test page, for a
//     headless-browser run (dev/browser-smoke.mjs).
// It is a test double, not a reference server: no persistence, no origin checks, no rate limits.
import { createDecipheriv, createECDH, createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';

const INFO = 'vigil/collect/v1';
const PROOF_INFO = 'vigil/collect/v1/proof';
const b64u = (buf) => Buffer.from(buf).toString('base64url');
const id = (prefix) => prefix + randomBytes(13).toString('hex').slice(0, 26);

function envelope(status, code, message) {
  return { status, body: { error: { code, message, status, retryable: status === 429 || status >= 500, request_id: id('req_'), details: {} } } };
}

export function createMockCollect({ key = 'pk_test_mock', maxBatchBytes = 65536 } = {}) {
  const sessions = new Map();
  const log = []; // every request: { method, path, headers, body, at }
  const injected = []; // { match: (method, path) => bool, status, code }

  function session(sid) {
    const s = sessions.get(sid);
    if (!s) throw envelope(404, 'collect.session_not_found', 'no such session');
    return s;
  }

  /**
   * collect.md §1.1: the call's Vigil-Session-Proof must be the HMAC of "<METHOD> <path>\n<sid>\n
   * <counter>" under the session's proof key, with a counter above the last one spent.
   */
  function requireProof(s, method, path, headers) {
    const value = String(headers['vigil-session-proof'] || '');
    const m = /^([1-9][0-9]{0,15})\.([A-Za-z0-9_-]+)$/.exec(value);
    if (!m) throw envelope(401, 'collect.session_proof_invalid', 'missing or malformed proof');
    const counter = Number(m[1]);
    const expected = createHmac('sha256', s.proofKey).update(`${method} ${path}\n${s.id}\n${counter}`).digest();
    const given = Buffer.from(m[2], 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      throw envelope(401, 'collect.session_proof_invalid', 'proof does not verify');
    }
    if (counter <= s.lastCall) throw envelope(401, 'collect.session_proof_invalid', 'counter already spent');
    s.lastCall = counter;
    s.proofs.push({ method, path, counter });
  }

  function open(s, seq, ciphertext) {
    const ct = Buffer.from(ciphertext, 'base64url');
    const nonce = Buffer.alloc(12);
    nonce.writeBigUInt64BE(BigInt(seq), 4);
    const decipher = createDecipheriv('aes-256-gcm', s.key, nonce);
    decipher.setAAD(Buffer.from(`${s.id}.${seq}`));
    decipher.setAuthTag(ct.subarray(ct.length - 16));
    return Buffer.concat([decipher.update(ct.subarray(0, ct.length - 16)), decipher.final()]).toString('utf8');
  }

  const routes = [
    ['POST', /^\/v1\/collect\/sessions$/, (m, body) => {
      const clientKey = Buffer.from(String(body.client_public_key || ''), 'base64url');
      if (clientKey.length !== 65 || clientKey[0] !== 4) throw envelope(422, 'request.validation_failed', 'client_public_key');
      const ecdh = createECDH('prime256v1');
      ecdh.generateKeys();
      const sid = id('sid_');
      const shared = ecdh.computeSecret(clientKey);
      const s = {
        id: sid,
        key: Buffer.from(hkdfSync('sha256', shared, Buffer.from(sid), Buffer.from(INFO), 32)),
        proofKey: Buffer.from(hkdfSync('sha256', shared, Buffer.from(sid), Buffer.from(PROOF_INFO), 32)),
        lastCall: 0,
        proofs: [], // every proven call accepted: { method, path, counter }
        pings: [id('png_'), id('png_'), id('png_')],
        pingArrivals: [],
        token: b64u(randomBytes(16)),
        batches: new Map(),
        opened: body,
        ws: false,
        results: 0,
      };
      sessions.set(sid, s);
      return { status: 201, body: { data: {
        object: 'collect_session', id: sid, server_public_key: b64u(ecdh.getPublicKey()),
        expires_at: new Date(Date.now() + 30 * 60e3).toISOString(), pings: s.pings,
        max_batch_bytes: maxBatchBytes, network_check_token: s.token,
      } } };
    }],
    ['GET', /^\/v1\/collect\/pings\/([^/]+)$/, (m, body, raw, headers) => {
      const s = [...sessions.values()].find((x) => x.pings.includes(m[1]));
      if (!s) throw envelope(404, 'collect.ping_not_found', 'no such ping');
      requireProof(s, 'GET', m[0], headers);
      s.pingArrivals.push({ id: m[1], at: performance.now() });
      return { status: 200, body: { data: { id: m[1], server_time: new Date().toISOString() } } };
    }],
    ['POST', /^\/v1\/collect\/sessions\/([^/]+)\/batches$/, (m, body, raw) => {
      const s = session(m[1]);
      if (raw.length > maxBatchBytes) throw envelope(413, 'request.too_large', 'batch too large');
      if (!Number.isSafeInteger(body.seq) || body.seq < 1) throw envelope(422, 'request.validation_failed', 'seq');
      if (s.batches.has(body.seq)) throw envelope(409, 'collect.batch_replayed', 'seq already accepted');
      let plaintext;
      try {
        plaintext = open(s, body.seq, String(body.ciphertext));
      } catch (_) {
        throw envelope(422, 'collect.batch_invalid', 'ciphertext does not open');
      }
      s.batches.set(body.seq, JSON.parse(plaintext));
      return { status: 202, body: { data: { session_id: s.id, seq: body.seq, accepted: true } } };
    }],
    ['POST', /^\/v1\/collect\/network-checks$/, (m, body, raw, headers) => {
      const s = session(body.session_id);
      requireProof(s, 'POST', m[0], headers);
      s.networkChecked = true;
      return { status: 200, body: { data: { session_id: s.id, consistent: s.ws } } };
    }],
    ['POST', /^\/v1\/collect\/sessions\/([^/]+)\/results$/, (m, body, raw, headers) => {
      const s = session(m[1]);
      requireProof(s, 'POST', m[0], headers);
      s.results++;
      return { status: 200, body: { data: {
        handoff: 'vh1.k1.' + b64u(randomBytes(40)), expires_at: new Date(Date.now() + 10 * 60e3).toISOString(),
      } } };
    }],
  ];

  /** Answers one collect request: { status, body }. */
  function handle(method, path, headers, raw) {
    const entry = { method, path, headers, body: raw, at: performance.now() };
    log.push(entry);
    const auth = headers.authorization || headers.Authorization;
    for (const [i, inj] of injected.entries()) {
      if (inj.match(method, path)) {
        if (!inj.sticky) injected.splice(i, 1);
        return envelope(inj.status, inj.code, 'injected').valueOf();
      }
    }
    if (auth !== `Bearer ${key}`) return envelope(401, 'auth.invalid_credentials', 'bad key');
    for (const [verb, re, fn] of routes) {
      const m = verb === method && re.exec(path);
      if (!m) continue;
      try {
        const body = raw ? JSON.parse(raw) : {};
        return fn(m, body, raw || '', headers);
      } catch (e) {
        if (e && e.status) return e;
        return envelope(400, 'request.malformed', String(e));
      }
    }
    return envelope(404, 'request.route_not_found', 'no route');
  }

  return {
    key,
    sessions,
    log,
    handle,
    /** The next matching request (or every one, when sticky) gets this error. */
    inject(method, pathPattern, status, code, sticky = false) {
      injected.push({ match: (m, p) => m === method && pathPattern.test(p), status, code, sticky });
    },
    markWebSocket(sid, token) {
      const s = sessions.get(sid);
      if (s && s.token === token) s.ws = true;
      return Boolean(s && s.token === token);
    },
  };
}

/** A fetch() that answers from the mock, recording each call's init for assertions. */
export function mockFetch(mock, calls = []) {
  return async (url, init = {}) => {
    const u = new URL(url);
    calls.push({ url, init });
    const headers = Object.fromEntries(Object.entries(init.headers || {}).map(([k, v]) => [k.toLowerCase(), v]));
    const { status, body } = mock.handle(init.method || 'GET', u.pathname, headers, init.body || '');
    return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
  };
}

const TEST_PAGE = (key) => `<!doctype html>
<html><head><meta charset="utf-8"><title>Vigil SDK smoke</title></head>
<body><p id="out">loading…</p>
<script>
  // Long tasks from the first moment: the SDK's cost in the page is what we measure.
  window.__longTasks = [];
  try {
    new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longTasks.push([e.startTime, e.duration]); })
      .observe({ type: 'longtask', buffered: true });
  } catch (e) {}
</script>
<script>
  // ?tamper=1: what a stealth kit does, so the detectors can be seen to fire.
  if (new URLSearchParams(location.search).get('tamper')) {
    Object.defineProperty(navigator, 'webdriver', { get: () => false });
    Object.defineProperty(Navigator.prototype, 'languages', { get: function () { return ['en-US', 'en']; } });
    const realQuery = Permissions.prototype.query;
    Permissions.prototype.query = function query(p) { return realQuery.call(this, p); };
    window.__nightmare = {};
    document.$cdc_asdjflasutopfhvcZLmcfl_ = {};
  }
</script>
<script src="/sdk/v1/vigil.js"></script>
<script>
  (async () => {
    const report = { errors: [] };
    // ?delay=ms loads the SDK that long after the page started (a warm browser), for comparison.
    await new Promise((r) => setTimeout(r, Number(new URLSearchParams(location.search).get('delay') || 0)));
    const t0 = performance.now();
    try {
      const agent = await Vigil.load({ key: ${JSON.stringify(key)} });
      report.load_ms = performance.now() - t0;
      const during = window.__longTasks.filter(([start]) => start >= t0 && start <= t0 + report.load_ms);
      report.long_tasks = during;
      report.blocking_ms = during.reduce((sum, [, d]) => sum + Math.max(0, d - 50), 0);
      report.long_task_ms = during.reduce((sum, [, d]) => sum + d, 0);
      report.session_id = agent.sessionId;
      report.cold = agent.loadTimings;
      // Synthetic (untrusted) input, to see an interactions batch go out.
      window.dispatchEvent(new KeyboardEvent('keydown', { key: 'a' }));
      document.dispatchEvent(new PointerEvent('pointermove', { clientX: 10, clientY: 20, bubbles: true }));
      await new Promise((r) => setTimeout(r, 2300));
      // A second, warm probe run, for per-probe timings (not part of the protocol).
      const warm = await Vigil._internal.collectProbes(Vigil._internal.PROBES, 150);
      report.warm_probes = { collected_in_ms: warm.collectedInMs, timed_out: warm.timedOut, timings: warm.timings };
      const stored = await agent.storeVisitorToken('vt1.smoke-token');
      report.stored_in = stored;
      report.read_back = await Vigil._internal.readVisitorToken();
      const result = await agent.result();
      report.handoff = result.handoff;
      report.last_error = agent.lastError && agent.lastError.code;
    } catch (e) {
      report.errors.push(String(e && e.code) + ': ' + String(e && e.message));
    }
    document.getElementById('out').textContent = JSON.stringify(report);
    await fetch('/__report', { method: 'POST', body: JSON.stringify(report) });
  })();
</script></body></html>`;

function wsAccept(key) {
  return createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC11D65').digest('base64');
}

/** A real server: CORS collect routes, the WebSocket check, /sdk/v1/vigil.js and /smoke.html. */
export function startHttpServer(mock, { sdkPath, port = 0, onReport } = {}) {
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const path = new URL(req.url, 'http://x').pathname;
      const cors = {
        'access-control-allow-origin': req.headers.origin || '*',
        'access-control-allow-headers': 'Authorization, Content-Type, Vigil-Session-Proof',
        'access-control-allow-methods': 'GET, POST, OPTIONS',
        'access-control-max-age': '600',
      };
      if (req.method === 'OPTIONS') { res.writeHead(204, cors); return res.end(); }
      if (path === '/sdk/v1/vigil.js') {
        res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-store' });
        return res.end(readFileSync(sdkPath));
      }
      if (path === '/smoke.html') {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        return res.end(TEST_PAGE(mock.key));
      }
      if (path === '/__report') {
        res.writeHead(204);
        res.end();
        if (onReport) onReport(JSON.parse(raw));
        return;
      }
      const { status, body } = mock.handle(req.method, path, req.headers, raw);
      res.writeHead(status, { 'content-type': 'application/json', ...cors });
      res.end(JSON.stringify(body));
    });
  });
  server.on('upgrade', (req, socket) => {
    socket.on('error', () => {}); // the client may close first, as the SDK does once it has the message
    const u = new URL(req.url, 'http://x');
    if (u.pathname !== '/v1/collect/ws' || !mock.markWebSocket(u.searchParams.get('session'), u.searchParams.get('token'))) {
      socket.end('HTTP/1.1 401 Unauthorized\r\n\r\n');
      return;
    }
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
      `Sec-WebSocket-Accept: ${wsAccept(req.headers['sec-websocket-key'])}\r\n\r\n`);
    const message = Buffer.from('{"object":"network_check","recorded":true}');
    socket.write(Buffer.concat([Buffer.from([0x81, message.length]), message])); // one text frame
    socket.end(Buffer.from([0x88, 0x02, 0x03, 0xe8])); // close, 1000
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}
