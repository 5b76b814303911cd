/*!
 * Vigil browser SDK, collect protocol v1. Served at /sdk/v1/vigil.js.
 *
 *   const agent = await Vigil.load({ key: 'pk_test_…', endpoint: 'https://api.example' });
 *   const { handoff } = await agent.result();   // give `handoff` to your backend
 *
 * What load() does, in order (schemas/collect.md is the contract for every request and member):
 *   1. starts recording interaction events (types and timings only: never key values, never
 *      form contents), generates an ephemeral ECDH P-256 key pair and opens the collect session;
 *   2. at the same time runs the time-boxed probes (each in its own try/catch and budget, the
 *      set sharing a 300 ms deadline, yielding to the page between steps);
 *   3. runs the three pings one after another alongside the probes, each round trip read from
 *      the browser's Resource Timing entry so that our own work does not inflate it (pings, the
 *      network check and results each carry a proof that we hold the session's key: collect.md
 *      §1.1);
 *   4. seals the probes batch (seq 1) with AES-256-GCM under the key both sides derive, sends it
 *      and resolves once the server has acknowledged it;
 *   5. in the background: the WebSocket network check, then every ~2 s an interactions batch
 *      while there are events, and a keepalive flush when the page is hidden or left.
 *
 * Rules the code keeps: nothing throws synchronously into the page (every failure is a rejected
 * promise carrying the server's `error.code`, or for background work `agent.lastError` and the
 * `onError` option); a sequence number is never reused for different plaintext (AES-GCM nonces
 * are derived from it); no dependencies, no build step.
 */
(function (global) {
  'use strict';

  if (global.Vigil && global.Vigil.version) return; // loaded twice: keep the first instance

  // ───────────────────────────── Constants ─────────────────────────────

  const SDK_VERSION = '1.4.0';
  const HKDF_INFO = 'vigil/collect/v1';
  const PROOF_HKDF_INFO = 'vigil/collect/v1/proof';
  const PROOF_HEADER = 'Vigil-Session-Proof';
  // A cap for a stalled probe (a GPU that hangs), not a pace: the API's responses and other
  // probes' tasks run between a probe's own, so its wall time is more than its work.
  const PROBES_TOTAL_BUDGET_MS = 300;
  const INTERACTION_FLUSH_MS = 2000;
  const NETWORK_CHECK_WAIT_MS = 3000; // how long the WebSocket may take to say its one message
  const REQUEST_TIMEOUT_MS = 10000;
  const VISITOR_TOKEN_NAME = 'vigil_vid';
  const WINDOW_NAME_PREFIX = VISITOR_TOKEN_NAME + '=';
  const COOKIE_MAX_AGE_S = 365 * 24 * 3600;
  const DEFAULT_MAX_BATCH_BYTES = 65536;

  // Captured at evaluation time, before any later page script can wrap them.
  const fnToString = Function.prototype.toString;
  const hasOwn = Object.prototype.hasOwnProperty;
  const now = () => global.performance.now();
  const round1 = (x) => Math.round(x * 10) / 10;
  const noop = () => {};

  // The endpoint defaults to the origin that served this script (/sdk/v1/vigil.js).
  const SCRIPT_ORIGIN = attempt(() => new URL(global.document.currentScript.src).origin);

  // ───────────────────────────── Errors ─────────────────────────────

  /** Every rejection of the SDK is a VigilError; `code` is the server's error.code when it sent one. */
  class VigilError extends Error {
    constructor(code, message, extra) {
      super(message);
      this.name = 'VigilError';
      this.code = code;
      this.status = (extra && extra.status) || null;
      this.requestId = (extra && extra.requestId) || null;
      this.retryable = Boolean(extra && extra.retryable);
      this.retryAfterMs = (extra && extra.retryAfterMs) || null;
      this.details = (extra && extra.details) || null;
    }
  }

  /** Runs fn, returning `fallback` when it throws or yields undefined: probes report, never fail. */
  function attempt(fn, fallback = null) {
    try {
      const value = fn();
      return value === undefined ? fallback : value;
    } catch (_) {
      return fallback;
    }
  }

  // ───────────────────────────── Encoding ─────────────────────────────

  const utf8 = (text) => new TextEncoder().encode(text);

  function toBytes(data) {
    if (data instanceof Uint8Array) return data;
    if (data instanceof ArrayBuffer) return new Uint8Array(data);
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    throw new TypeError('expected bytes');
  }

  /** base64url without padding, as every binary value of the contract. */
  function b64uEncode(data) {
    const bytes = toBytes(data);
    let binary = '';
    for (let i = 0; i < bytes.length; i += 0x8000) {
      binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }

  function b64uDecode(text) {
    if (typeof text !== 'string' || !/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) {
      throw new VigilError('sdk.invalid_response', 'not base64url');
    }
    const b64 = text.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((text.length + 3) % 4);
    const binary = atob(b64);
    const out = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
    return out;
  }

  function hex(data) {
    const bytes = toBytes(data);
    let out = '';
    for (let i = 0; i < bytes.length; i++) out += bytes[i].toString(16).padStart(2, '0');
    return out;
  }

  // ───────────────────────────── Crypto (collect.md §1, §3) ─────────────────────────────

  const subtle = () => global.crypto && global.crypto.subtle;

  /** Ephemeral ECDH P-256 pair. The private key is not extractable; public keys always export. */
  function generateKeyPair() {
    return subtle().generateKey({ name: 'ECDH', namedCurve: 'P-256' }, false, ['deriveBits']);
  }

  /** The 65-byte uncompressed point (0x04 ‖ X ‖ Y). */
  async function exportPublicKey(publicKey) {
    return new Uint8Array(await subtle().exportKey('raw', publicKey));
  }

  /**
   * ECDH shared secret (32-byte x coordinate) → HKDF-SHA256(salt = UTF-8 session id) → the
   * session's two keys, exactly collect.md §1 and §1.1: an AES-256-GCM batch key
   * (info "vigil/collect/v1") and an HMAC-SHA256 proof key (info "vigil/collect/v1/proof").
   */
  async function deriveSessionKeys(privateKey, serverPublicRaw, sessionId, options) {
    const raw = toBytes(serverPublicRaw);
    if (raw.length !== 65 || raw[0] !== 0x04) {
      throw new VigilError('sdk.invalid_response', 'server_public_key is not an uncompressed P-256 point');
    }
    const serverKey = await subtle().importKey('raw', raw, { name: 'ECDH', namedCurve: 'P-256' }, false, []);
    const shared = await subtle().deriveBits({ name: 'ECDH', public: serverKey }, privateKey, 256);
    const ikm = await subtle().importKey('raw', shared, 'HKDF', false, ['deriveKey']);
    const extractable = Boolean(options && options.extractable); // true only in tests, to compare with vectors
    const hkdf = (info) => ({ name: 'HKDF', hash: 'SHA-256', salt: utf8(sessionId), info: utf8(info) });
    const [batchKey, proofKey] = await Promise.all([
      subtle().deriveKey(hkdf(HKDF_INFO), ikm, { name: 'AES-GCM', length: 256 }, extractable, ['encrypt', 'decrypt']),
      subtle().deriveKey(hkdf(PROOF_HKDF_INFO), ikm, { name: 'HMAC', hash: 'SHA-256', length: 256 }, extractable, ['sign']),
    ]);
    return { batchKey, proofKey };
  }

  /** The batch key alone (collect.md §1). */
  async function deriveSessionKey(privateKey, serverPublicRaw, sessionId, options) {
    return (await deriveSessionKeys(privateKey, serverPublicRaw, sessionId, options)).batchKey;
  }

  /** What a call proof MACs (collect.md §1.1): UTF-8 of "<METHOD> <path>\n<sessionId>\n<counter>". */
  function proofMessage(method, path, sessionId, counter) {
    checkSeq(counter);
    return utf8(method + ' ' + path + '\n' + sessionId + '\n' + counter);
  }

  /** The Vigil-Session-Proof value: "<counter>.<b64u of HMAC-SHA256(proof key, message)>". */
  async function proveCall(proofKey, method, path, sessionId, counter) {
    const mac = await subtle().sign('HMAC', proofKey, proofMessage(method, path, sessionId, counter));
    return counter + '.' + b64uEncode(mac);
  }

  function checkSeq(seq) {
    if (!Number.isSafeInteger(seq) || seq < 1) throw new RangeError('seq must be a positive safe integer');
  }

  /** nonce = 4 zero bytes ‖ seq as 8 bytes big-endian. */
  function nonceFor(seq) {
    checkSeq(seq);
    const nonce = new Uint8Array(12);
    const view = new DataView(nonce.buffer);
    view.setUint32(4, Math.floor(seq / 0x100000000));
    view.setUint32(8, seq >>> 0);
    return nonce;
  }

  /** additional data = UTF-8 of "<sessionId>.<seq>": binds a batch to its session and place. */
  function aadFor(sessionId, seq) {
    checkSeq(seq);
    return utf8(sessionId + '.' + seq);
  }

  function plaintextBytes(plaintext) {
    if (typeof plaintext === 'string') return utf8(plaintext);
    if (plaintext instanceof Uint8Array || plaintext instanceof ArrayBuffer) return toBytes(plaintext);
    return utf8(JSON.stringify(plaintext));
  }

  /** AES-256-GCM, 128-bit tag appended (WebCrypto's layout); returns b64u. */
  async function sealBatch(key, sessionId, seq, plaintext) {
    const sealed = await subtle().encrypt(
      { name: 'AES-GCM', iv: nonceFor(seq), additionalData: aadFor(sessionId, seq), tagLength: 128 },
      key,
      plaintextBytes(plaintext)
    );
    return b64uEncode(sealed);
  }

  /** The inverse, for tests and debugging; the SDK itself never decrypts. */
  async function openBatch(key, sessionId, seq, ciphertextB64u) {
    const opened = await subtle().decrypt(
      { name: 'AES-GCM', iv: nonceFor(seq), additionalData: aadFor(sessionId, seq), tagLength: 128 },
      key,
      b64uDecode(ciphertextB64u)
    );
    return new TextDecoder().decode(opened);
  }

  async function sha256Hex(data) {
    return hex(await subtle().digest('SHA-256', toBytes(data)));
  }

  // ───────────────────────────── Transport ─────────────────────────────

  function retryAfterMs(response) {
    const value = attempt(() => response.headers.get('retry-after'));
    const seconds = Number(value);
    return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : null;
  }

  /**
   * One JSON request to the collect API. Resolves with the envelope's `data`; rejects with a
   * VigilError carrying the server's error.code (or an sdk.* code when there was no answer).
   * `timing.sentAt` and `timing.headersAt` are set when the request left and when the response
   * head arrived, for the ping round trips. `options.proof` is sent as the Vigil-Session-Proof.
   */
  async function request(conn, method, path, body, options) {
    const opts = options || {};
    const headers = { Authorization: 'Bearer ' + conn.key };
    if (opts.proof) headers[PROOF_HEADER] = opts.proof;
    let payload;
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      payload = typeof body === 'string' ? body : JSON.stringify(body);
    }
    const controller = typeof AbortController === 'function' ? new AbortController() : null;
    const timer = controller ? setTimeout(() => controller.abort(), opts.timeoutMs || REQUEST_TIMEOUT_MS) : null;
    let response;
    if (opts.timing) opts.timing.sentAt = now();
    try {
      response = await global.fetch(conn.endpoint + path, {
        method,
        headers,
        body: payload,
        mode: 'cors',
        credentials: 'omit', // no cookies of the API origin ride along: the key is the credential
        cache: 'no-store', // pings must reach the server every time
        keepalive: Boolean(opts.keepalive),
        signal: controller ? controller.signal : undefined,
      });
    } catch (e) {
      const timedOut = controller && controller.signal.aborted;
      throw new VigilError(timedOut ? 'sdk.timeout' : 'sdk.network_error',
        (timedOut ? 'request timed out: ' : 'request failed: ') + method + ' ' + path, { retryable: true });
    } finally {
      if (timer) clearTimeout(timer);
    }
    if (opts.timing) opts.timing.headersAt = now();
    let json = null;
    try {
      json = await response.json();
    } catch (_) {
      json = null;
    }
    if (!response.ok) {
      const err = json && typeof json.error === 'object' && json.error ? json.error : null;
      throw new VigilError(
        err && typeof err.code === 'string' ? err.code : 'sdk.http_' + response.status,
        err && typeof err.message === 'string' ? err.message : 'HTTP ' + response.status + ' on ' + method + ' ' + path,
        {
          status: response.status,
          requestId: (err && err.request_id) || attempt(() => response.headers.get('x-request-id')),
          retryable: err && typeof err.retryable === 'boolean'
            ? err.retryable
            : response.status === 429 || response.status >= 500,
          retryAfterMs: retryAfterMs(response),
          details: err && err.details,
        }
      );
    }
    if (!json || typeof json.data !== 'object' || json.data === null) {
      throw new VigilError('sdk.invalid_response', 'response has no data object: ' + method + ' ' + path,
        { status: response.status });
    }
    return json.data;
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  /** Waits for `promise` at most `ms`, without leaving the timer behind. */
  function settledWithin(promise, ms) {
    let timer;
    return Promise.race([promise, new Promise((resolve) => { timer = setTimeout(resolve, ms); })])
      .finally(() => clearTimeout(timer));
  }

  // ───────────────────────────── Scheduling ─────────────────────────────

  /**
   * Gives the main thread back to the page. A resolved-promise `await` would not: microtasks
   * run inside the same task, so heavy steps chained that way add up to one long task.
   */
  // A new task at the back of the queue (not `scheduler.yield()`, whose continuation runs
  // before waiting tasks): the session's and the pings' responses are handled between probes,
  // so the pings overlap the probes instead of waiting for the last to start.
  function yieldToMain() {
    if (typeof MessageChannel === 'function') {
      return new Promise((resolve) => {
        const channel = new MessageChannel();
        channel.port1.onmessage = () => {
          channel.port1.close();
          resolve();
        };
        channel.port2.postMessage(0);
      });
    }
    return sleep(0);
  }

  const TIMED_OUT = Symbol('timed out');

  function setPath(target, path, value) {
    const keys = path.split('.');
    let node = target;
    for (let i = 0; i < keys.length - 1; i++) {
      if (typeof node[keys[i]] !== 'object' || node[keys[i]] === null) node[keys[i]] = {};
      node = node[keys[i]];
    }
    node[keys[keys.length - 1]] = value;
  }

  /**
   * Runs one probe inside its budget. A probe returns { 'section.member': value }; on timeout
   * none of its members are written (the contract: listed in timed_out, member absent) and its
   * signal aborts so it can release what it holds; on error its members are null.
   */
  async function runProbe(probe, budgetMs, env, out, timedOut, timings) {
    const started = now();
    const controller = typeof AbortController === 'function' ? new AbortController() : { signal: null, abort: noop };
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve(TIMED_OUT), budgetMs);
    });
    let values;
    try {
      values = await Promise.race([probe.run(env, controller.signal), timeout]);
    } catch (_) {
      values = {};
      for (const path of probe.members) values[path] = null;
    } finally {
      clearTimeout(timer);
      timings[probe.name] = round1(now() - started);
    }
    if (values === TIMED_OUT) {
      controller.abort();
      timedOut.push(probe.name);
      return;
    }
    for (const path of probe.members) setPath(out, path, hasOwn.call(values, path) ? values[path] : null);
  }

  /**
   * Starts the probes one after another with a macrotask yield between starts (so no two
   * probes' synchronous parts share a task), lets their asynchronous parts overlap, and bounds
   * the whole set by `totalBudgetMs`. `launched` settles once every probe has started and the
   * main thread is free again (the rest is mostly waiting on other threads: the worker, the
   * audio renderer, IndexedDB, the browser process); `finished` gives the observations.
   */
  function startProbes(probes, totalBudgetMs) {
    const started = now();
    const deadline = started + totalBudgetMs;
    const env = new ProbeEnv();
    env.withWorker = probes.includes(probeWorker);
    const out = {};
    const timedOut = [];
    const timings = {}; // per-probe wall time, for tuning budgets (not sent)
    const running = [];
    const launched = (async () => {
      for (const probe of probes) {
        // A probe that only waits on another thread (a worker starting, the audio renderer) costs
        // the page nothing while it waits: it keeps its own budget instead of the set's.
        const budget = probe.offMainThread ? probe.budgetMs : Math.max(1, Math.min(probe.budgetMs, deadline - now()));
        running.push(runProbe(probe, budget, env, out, timedOut, timings));
        await yieldToMain();
      }
    })();
    const finished = launched.then(() => Promise.all(running)).then(() => {
      const order = probes.map((p) => p.name);
      timedOut.sort((a, b) => order.indexOf(a) - order.indexOf(b));
      return { observations: out, timedOut, collectedInMs: round1(now() - started), timings };
    });
    // Removing the pristine frame and losing the WebGL context cost the main thread a few
    // milliseconds: `load` does it once the probes batch is acknowledged, not before sending it.
    const release = () => finished.then(() => env.release(), () => env.release());
    return { launched, finished, release };
  }

  function collectProbes(probes, totalBudgetMs) {
    const set = startProbes(probes, totalBudgetMs);
    return set.finished.finally(set.release);
  }

  /** Resources two probes share: one WebGL context is expensive enough to create once. */
  class ProbeEnv {
    constructor() {
      this._gl = undefined;
      this._frame = undefined;
      /** Whether the set has the worker probe, and the [zone, locale] its worker reports. */
      this.withWorker = false;
      this.workerLocale = new Promise((resolve) => { this.resolveWorkerLocale = resolve; });
      /** The worker's WebGL { vendor, renderer, parametersHash, hash } (the scene's), or null. */
      this.workerGpu = new Promise((resolve) => { this.resolveWorkerGpu = resolve; });
    }
    webgl() {
      if (this._gl === undefined) {
        this._gl = attempt(() => {
          const canvas = global.document.createElement('canvas');
          canvas.width = 64;
          canvas.height = 64;
          return canvas.getContext('webgl') || canvas.getContext('experimental-webgl');
        });
      }
      return this._gl;
    }
    /**
     * A pristine realm: the window of a hidden, same-origin (about:blank) iframe. Its built-ins
     * are the browser's own unless a tool patches every new frame too, and even then its patches
     * are its own functions, so page-realm replacements read as script source through it.
     */
    pristine() {
      if (this._frame === undefined) {
        this._frame = attempt(() => {
          const frame = global.document.createElement('iframe');
          frame.setAttribute('aria-hidden', 'true');
          frame.tabIndex = -1;
          frame.style.cssText = 'display:none';
          (global.document.body || global.document.documentElement).appendChild(frame);
          return frame.contentWindow ? frame : (frame.remove(), null);
        });
      }
      return this._frame ? this._frame.contentWindow : null;
    }
    release() {
      if (this._frame) attempt(() => this._frame.remove());
      this._frame = null;
      // Browsers cap live WebGL contexts per page; give ours back instead of waiting for GC.
      if (this._gl) attempt(() => { const ext = this._gl.getExtension('WEBGL_lose_context'); if (ext) ext.loseContext(); });
      this._gl = null;
    }
  }

  // ───────────────────────────── Probes: automation markers (BotD set and more) ─────────────────────────────

  // Window globals left by automation tools (BotD's distinctive properties, plus Playwright and
  // Cypress bindings). Some (emit, spawn) are generic names: the processor weighs them.
  const WINDOW_MARKERS = [
    'awesomium', 'RunPerfTest', 'CefSharp', 'emit', 'fmget_targets', 'geb', '__nightmare', 'nightmare',
    '__phantomas', 'callPhantom', '_phantom', 'spawn', '_Selenium_IDE_Recorder', '_selenium',
    'calledSelenium', 'wdioElectron', 'webdriver', '__webdriverFunc', '__lastWatirAlert', '__lastWatirConfirm',
    '__lastWatirPrompt', '_WEBDRIVER_ELEM_CACHE', 'ChromeDriverw', 'domAutomation', 'domAutomationController',
    '__playwright__binding__', '__pwInitScripts', 'Cypress',
  ];
  // chromedriver's injected window keys, e.g. cdc_adoQpoasnfa76pfcZLmcfl_Array.
  const WINDOW_MARKER_PATTERNS = [/^([a-z]){3}_.*_(Array|Promise|Symbol)$/, /^\$?(cdc|wdc)_/];
  const DOCUMENT_MARKERS = [
    '__selenium_evaluate', 'selenium-evaluate', '__selenium_unwrapped', '__webdriver_script_fn', '__driver_evaluate',
    '__webdriver_evaluate', '__fxdriver_evaluate', '__driver_unwrapped', '__webdriver_unwrapped', '__fxdriver_unwrapped',
    '__webdriver_script_func', '__webdriver_script_function', '$cdc_asdjflasutopfhvcZLmcf', '$cdc_asdjflasutopfhvcZLmcfl_',
    '$chrome_asyncScriptInfo', '__$webdriverAsyncExecutor',
  ];
  const DOCUMENT_MARKER_PATTERNS = [/^\$(cdc|wdc)_/, /^__(selenium|webdriver|driver|fxdriver)_/];
  const ELEMENT_ATTRIBUTE_MARKERS = ['selenium', 'webdriver', 'driver'];
  const SELENIUM_NAME = /selenium|webdriver|driver|watir|cdc_|wdc_/i;

  /**
   * Entry format (documented in README): a window global as its bare name, a document key as
   * "document.<name>", a root element attribute as "documentElement@<name>", and two non-global
   * BotD traces as "external:Sequentum" and "missing:Function.prototype.bind" (PhantomJS 1).
   */
  function findAutomationGlobals() {
    const found = [];
    const windowNames = attempt(() => Object.getOwnPropertyNames(global), []);
    const windowSet = new Set(windowNames);
    for (const name of WINDOW_MARKERS) if (windowSet.has(name)) found.push(name);
    for (const name of windowNames) {
      if (!WINDOW_MARKERS.includes(name) && WINDOW_MARKER_PATTERNS.some((re) => re.test(name))) found.push(name);
    }
    const documentNames = attempt(() => Object.getOwnPropertyNames(global.document), []);
    for (const name of documentNames) {
      if (DOCUMENT_MARKERS.includes(name) || DOCUMENT_MARKER_PATTERNS.some((re) => re.test(name))) found.push('document.' + name);
    }
    const attributes = attempt(() => global.document.documentElement.getAttributeNames(), []);
    for (const name of attributes) if (ELEMENT_ATTRIBUTE_MARKERS.includes(name)) found.push('documentElement@' + name);
    if (attempt(() => /Sequentum/i.test(String(global.external)), false)) found.push('external:Sequentum');
    if (typeof Function.prototype.bind !== 'function') found.push('missing:Function.prototype.bind');
    return found.slice(0, 64);
  }

  /** Which engine produced an Error's stack (V8 "    at …" frames, SpiderMonkey/JSC "fn@url"). */
  function errorStackEngine() {
    let stack = '';
    let message = '';
    try {
      const nothing = null;
      nothing[0]();
    } catch (e) {
      stack = String((e && e.stack) || '');
      message = String((e && e.message) || '');
    }
    if (/phantomjs/i.test(stack)) return 'phantomjs';
    if (/^\s+at\s/m.test(stack)) return 'v8';
    if (/is not an object/.test(message)) return 'jsc';
    if (/has no properties|is null/.test(message)) return 'spidermonkey';
    if (/@/.test(stack)) return 'unknown_at_frames';
    return 'unknown';
  }

  /** BotD's plugin/mime checks: genuine prototypes, and each plugin's mime types linking back to it. */
  function pluginsConsistent(nav) {
    const plugins = nav.plugins;
    const mimes = nav.mimeTypes;
    if (!plugins || !mimes) return false;
    let ok = typeof PluginArray === 'function' && Object.getPrototypeOf(plugins) === PluginArray.prototype &&
      typeof MimeTypeArray === 'function' && Object.getPrototypeOf(mimes) === MimeTypeArray.prototype;
    for (let i = 0; ok && i < plugins.length; i++) {
      const plugin = plugins[i];
      ok = typeof Plugin === 'function' && Object.getPrototypeOf(plugin) === Plugin.prototype &&
        plugins.namedItem(plugin.name) === plugin;
      for (let j = 0; ok && j < plugin.length; j++) {
        const mime = plugin[j];
        ok = typeof MimeType === 'function' && Object.getPrototypeOf(mime) === MimeType.prototype &&
          Boolean(mime.enabledPlugin) && mime.enabledPlugin.name === plugin.name;
      }
    }
    for (let i = 0; ok && i < mimes.length; i++) {
      ok = Object.getPrototypeOf(mimes[i]) === MimeType.prototype;
    }
    return ok;
  }

  function electronTraces() {
    const proc = attempt(() => global.process);
    if (!proc || typeof proc !== 'object') return false;
    return proc.type === 'renderer' || Boolean(proc.versions && proc.versions.electron);
  }

  function seleniumTraces(globals) {
    return globals.some((g) => SELENIUM_NAME.test(g) || g === '_Selenium_IDE_Recorder' || g === 'calledSelenium');
  }

  /**
   * How many times the console reads an Error's `name` when one is logged. A DevTools-protocol
   * client with the Runtime domain enabled (Puppeteer, Playwright, chromedriver, an open DevTools
   * window) has every console call serialised for it, which reads it once more than Chromium's
   * own logging does. The call goes through the pristine realm's console, so a page script
   * that wraps `console` (error trackers do) cannot add reads of its own; `debug` is the level
   * DevTools hides by default.
   */
  function devtoolsConsoleReads(env) {
    const realm = env.pristine();
    const debug = attempt(() => realm.console.debug);
    if (typeof debug !== 'function') return null;
    let reads = 0;
    const error = new Error('');
    Object.defineProperty(error, 'name', { configurable: true, get() { reads++; return 'Error'; } });
    attempt(() => debug.call(realm.console, error));
    return reads;
  }

  const probeAutomation = {
    name: 'automation',
    budgetMs: 80,
    members: [
      'automation.webdriver', 'automation.globals', 'automation.user_agent', 'automation.app_version',
      'automation.product_sub', 'automation.eval_length', 'automation.error_stack_engine',
      'automation.has_chrome_object', 'automation.notification_permission', 'automation.languages',
      'automation.language', 'automation.plugins', 'automation.mime_types', 'automation.plugins_consistent',
      'automation.window_outer', 'automation.window_inner', 'automation.window_position', 'automation.connection_rtt',
      'automation.document_focus', 'automation.document_visibility', 'automation.electron', 'automation.selenium',
      'automation.headless_ua',
    ],
    async run() {
      const nav = global.navigator || {};
      const ua = attempt(() => nav.userAgent);
      const globals = findAutomationGlobals();
      return {
        'automation.webdriver': attempt(() => (typeof nav.webdriver === 'boolean' ? nav.webdriver : null)),
        'automation.globals': globals,
        'automation.user_agent': ua,
        'automation.app_version': attempt(() => nav.appVersion),
        'automation.product_sub': attempt(() => nav.productSub),
        'automation.eval_length': attempt(() => global.eval.toString().length),
        'automation.error_stack_engine': errorStackEngine(),
        'automation.has_chrome_object': attempt(() => typeof global.chrome === 'object' && global.chrome !== null, false),
        'automation.notification_permission': attempt(() => (typeof Notification === 'function' ? Notification.permission : null)),
        'automation.languages': attempt(() => (nav.languages ? Array.from(nav.languages) : null)),
        'automation.language': attempt(() => nav.language),
        'automation.plugins': attempt(() => Array.from(nav.plugins).slice(0, 32).map((p) => ({ name: p.name, filename: p.filename }))),
        'automation.mime_types': attempt(() => Array.from(nav.mimeTypes).slice(0, 64).map((m) => m.type)),
        'automation.plugins_consistent': attempt(() => pluginsConsistent(nav)),
        'automation.window_outer': attempt(() => [global.outerWidth, global.outerHeight]),
        'automation.window_inner': attempt(() => [global.innerWidth, global.innerHeight]),
        // Where the window is on the screen: an X11 window has a place; Wayland never tells a
        // page its window's, so Chromium there says 0,0.
        'automation.window_position': attempt(() => [global.screenX, global.screenY]),
        'automation.connection_rtt': attempt(() => (nav.connection && typeof nav.connection.rtt === 'number' ? nav.connection.rtt : null)),
        'automation.document_focus': attempt(() => global.document.hasFocus()),
        // A page loaded in a background tab has no window to measure yet (outer size 0).
        'automation.document_visibility': attempt(() => global.document.visibilityState),
        'automation.electron': electronTraces(),
        'automation.selenium': seleniumTraces(globals),
        'automation.headless_ua': typeof ua === 'string' && /HeadlessChrome/.test(ua),
      };
    },
  };

  // Separate from the markers because the Permissions API answers asynchronously; headless
  // Chrome famously says Notification.permission "denied" while this says "prompt".
  const probePermissions = {
    name: 'permissions',
    budgetMs: 120,
    members: ['automation.permissions_notifications'],
    async run() {
      const status = await global.navigator.permissions.query({ name: 'notifications' });
      return { 'automation.permissions_notifications': status.state };
    },
  };

  // ───────────────────────────── Probes: browser and OS consistency ─────────────────────────────

  const probeBrowser = {
    name: 'browser',
    budgetMs: 60,
    members: [
      'browser.user_agent_data', 'browser.platform', 'browser.vendor', 'browser.hardware_concurrency',
      'browser.device_memory', 'browser.max_touch_points',
    ],
    async run() {
      const nav = global.navigator || {};
      return {
        'browser.user_agent_data': attempt(() => {
          const data = nav.userAgentData;
          if (!data) return null;
          return {
            brands: Array.from(data.brands || []).map((b) => ({ brand: b.brand, version: b.version })),
            mobile: data.mobile,
            platform: data.platform,
          };
        }),
        'browser.platform': attempt(() => nav.platform),
        'browser.vendor': attempt(() => nav.vendor),
        'browser.hardware_concurrency': attempt(() => nav.hardwareConcurrency),
        'browser.device_memory': attempt(() => nav.deviceMemory),
        'browser.max_touch_points': attempt(() => nav.maxTouchPoints),
      };
    },
  };

  // Client hints' high-entropy values: what the UA string would claim if it were not frozen.
  const probeHighEntropy = {
    name: 'high_entropy',
    budgetMs: 120,
    members: ['browser.high_entropy'],
    async run() {
      const data = global.navigator && global.navigator.userAgentData;
      if (!data || typeof data.getHighEntropyValues !== 'function') return { 'browser.high_entropy': null };
      const values = await data.getHighEntropyValues(['platformVersion', 'fullVersionList', 'architecture']);
      return {
        'browser.high_entropy': {
          platform_version: values.platformVersion == null ? null : values.platformVersion,
          full_version_list: Array.from(values.fullVersionList || []).map((b) => ({ brand: b.brand, version: b.version })),
          architecture: values.architecture == null ? null : values.architecture,
        },
      };
    },
  };

  // A Worker has its own navigator and its own WebGL (OffscreenCanvas), which page-level
  // spoofing (stealth plugins, hand-written patches, WebGL spoofers) does not reach: the
  // processor compares each value with the page's.
  const WORKER_MEMBERS = [
    'browser.worker_user_agent', 'browser.worker_platform', 'browser.worker_hardware_concurrency',
    'browser.worker_languages', 'browser.worker_device_memory', 'browser.worker_webgl_vendor',
    'browser.worker_webgl_renderer',
  ];
  // Two messages, so a slow GPU never costs the page the first: the navigator (and the IANA
  // zone and locale) at once; then the GPU, read on without waiting to be asked: its unmasked
  // vendor and renderer, the parameters hash (`webglParameterLines`) and the hash of the scene
  // `renderWebglScene` draws. Both hashes are what the page's own context would give (same GPU
  // process, same rasteriser), and here they cost the page's main thread nothing: read in the
  // page, the parameters alone (a dozen of them synchronous round trips to the GPU process) took
  // it 7 to 13 ms on a 2-core machine.
  const WORKER_SOURCE = `
    const n = navigator;
    const zone = (${fnToString.call(zoneAndLocale)})();
    postMessage({ navigator: [n.userAgent, n.platform, n.hardwareConcurrency, n.languages ? Array.from(n.languages) : null,
      typeof n.deviceMemory === 'number' ? n.deviceMemory : null], zone });
    const hex = (d) => Array.from(new Uint8Array(d)).map((b) => b.toString(16).padStart(2, '0')).join('');
    const sha256 = async (bytes) => hex(await crypto.subtle.digest('SHA-256', bytes));
    (async () => {
      const gpu = { vendor: null, renderer: null, parametersHash: null, hash: null };
      try {
        const c = typeof OffscreenCanvas === 'function' ? new OffscreenCanvas(64, 64).getContext('webgl') : null;
        const d = c && c.getExtension('WEBGL_debug_renderer_info');
        if (d) [gpu.vendor, gpu.renderer] = [c.getParameter(d.UNMASKED_VENDOR_WEBGL), c.getParameter(d.UNMASKED_RENDERER_WEBGL)];
        if (c) gpu.parametersHash = await sha256(new TextEncoder().encode((${fnToString.call(webglParameterLines)})(c)));
        const pixels = c && (${fnToString.call(renderWebglScene)})(c);
        if (pixels) gpu.hash = await sha256(pixels);
        const lose = c && c.getExtension('WEBGL_lose_context');
        if (lose) lose.loseContext();
      } catch (_) {}
      postMessage({ gpu });
    })();`;
  const WORKER_BUDGET_MS = 400;

  /** Settles with `promise`'s value, or with `fallback` once `deadline` (a `now()`) passes. */
  function until(promise, deadline, fallback, signal) {
    return Promise.race([promise, wait(Math.max(0, deadline - now()), signal).then(() => fallback)]);
  }
  const probeWorker = {
    name: 'worker',
    // The worker answers within tens of milliseconds, but its messages wait for the main thread,
    // which the other probes keep busy: the probe keeps what arrived by its own deadline (so a
    // busy page loses the GPU pair, not the navigator too) instead of timing out whole.
    budgetMs: WORKER_BUDGET_MS + 100,
    offMainThread: true, // a cold worker takes 100-200 ms just to start
    members: WORKER_MEMBERS,
    async run(env, signal) {
      const deadline = now() + WORKER_BUDGET_MS;
      if (typeof Worker !== 'function' || typeof Blob !== 'function') return {};
      const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: 'text/javascript' }));
      let worker = null;
      const release = () => {
        if (worker) worker.terminate();
        worker = null;
        URL.revokeObjectURL(url); // only now: revoking earlier can race the worker's fetch of it
      };
      if (signal) signal.addEventListener('abort', release);
      try {
        let gotGpu;
        const gpuArrived = new Promise((resolve) => { gotGpu = resolve; });
        const first = await until(new Promise((resolve, reject) => {
          worker = new Worker(url); // a page CSP without blob: in worker-src lands in onerror
          worker.onmessage = (e) => {
            const data = e.data || {};
            if (data.gpu) gotGpu(data.gpu);
            else resolve(data);
          };
          worker.onerror = (e) => {
            if (e && e.preventDefault) e.preventDefault();
            reject(new Error('worker failed'));
          };
        }), deadline, {}, signal);
        env.resolveWorkerLocale(Array.isArray(first.zone) ? first.zone : null);
        const gpu = await until(gpuArrived, deadline, null, signal);
        env.resolveWorkerGpu(gpu);
        const found = Array.isArray(first.navigator) ? first.navigator : [];
        const values = found.concat(gpu ? [gpu.vendor, gpu.renderer] : []);
        const out = {};
        WORKER_MEMBERS.forEach((member, i) => { out[member] = values[i] === undefined ? null : values[i]; });
        return out;
      } finally {
        env.resolveWorkerLocale(null); // no-ops once resolved
        env.resolveWorkerGpu(null);
        release();
      }
    },
  };

  // ───────────────────────────── Probes: rendering (WebGL, canvas, audio) ─────────────────────────────

  /**
   * The GPU's capability profile: "NAME=value" lines, sorted, joined by "\n". Stable across
   * sessions, so its hash can serve as a visitor-linkage anchor. Self-contained (its source also
   * runs in the worker), so it names nothing from the SDK.
   */
  function webglParameterLines(gl) {
    const value = (read) => {
      let v;
      try { v = read(); } catch (_) { v = null; }
      if (v == null) return 'null';
      if (typeof v === 'object' && typeof v.length === 'number') return Array.from(v).join(',');
      return String(v);
    };
    const lines = [
      'ALIASED_LINE_WIDTH_RANGE', 'ALIASED_POINT_SIZE_RANGE', 'ALPHA_BITS', 'BLUE_BITS', 'DEPTH_BITS', 'GREEN_BITS',
      'MAX_COMBINED_TEXTURE_IMAGE_UNITS', 'MAX_CUBE_MAP_TEXTURE_SIZE', 'MAX_FRAGMENT_UNIFORM_VECTORS',
      'MAX_RENDERBUFFER_SIZE', 'MAX_TEXTURE_IMAGE_UNITS', 'MAX_TEXTURE_SIZE', 'MAX_VARYING_VECTORS',
      'MAX_VERTEX_ATTRIBS', 'MAX_VERTEX_TEXTURE_IMAGE_UNITS', 'MAX_VERTEX_UNIFORM_VECTORS', 'MAX_VIEWPORT_DIMS',
      'RED_BITS', 'RENDERER', 'SHADING_LANGUAGE_VERSION', 'STENCIL_BITS', 'SUBPIXEL_BITS', 'VENDOR', 'VERSION',
    ].map((name) => name + '=' + value(() => gl.getParameter(gl[name])));
    const anisotropic = gl.getExtension('EXT_texture_filter_anisotropic');
    if (anisotropic) lines.push('MAX_TEXTURE_MAX_ANISOTROPY_EXT=' + value(() => gl.getParameter(anisotropic.MAX_TEXTURE_MAX_ANISOTROPY_EXT)));
    lines.push('EXTENSIONS=' + (gl.getSupportedExtensions() || []).slice().sort().join(','));
    for (const shader of ['VERTEX_SHADER', 'FRAGMENT_SHADER']) {
      for (const precision of ['LOW_FLOAT', 'MEDIUM_FLOAT', 'HIGH_FLOAT', 'LOW_INT', 'MEDIUM_INT', 'HIGH_INT']) {
        let format = null;
        try { format = gl.getShaderPrecisionFormat(gl[shader], gl[precision]); } catch (_) { /* stays null */ }
        lines.push(shader + '.' + precision + '=' + (format ? [format.rangeMin, format.rangeMax, format.precision].join(',') : 'null'));
      }
    }
    return lines.sort().join('\n');
  }

  // The page's own vendor and renderer: what a page-level spoofer reports, which the processor
  // compares with the worker's. The rest of the GPU's profile comes from the worker.
  const probeWebgl = {
    name: 'webgl',
    budgetMs: 150,
    members: ['rendering.webgl_vendor', 'rendering.webgl_renderer'],
    async run(env) {
      const gl = env.webgl(); // context creation is the one unsplittable step (~ms, more on SwiftShader)
      if (!gl) return {};
      await yieldToMain();
      const debug = gl.getExtension('WEBGL_debug_renderer_info');
      return {
        'rendering.webgl_vendor': gl.getParameter(debug ? debug.UNMASKED_VENDOR_WEBGL : gl.VENDOR),
        'rendering.webgl_renderer': gl.getParameter(debug ? debug.UNMASKED_RENDERER_WEBGL : gl.RENDERER),
      };
    },
  };

  /**
   * Draws a small gradient scene and reads its pixels back: they differ with GPU, driver and
   * rasteriser (SwiftShader, llvmpipe). Self-contained (its source also runs in the worker), so
   * it names nothing from the SDK.
   */
  function renderWebglScene(gl) {
    const compile = (type, source) => {
      const shader = gl.createShader(type);
      gl.shaderSource(shader, source);
      gl.compileShader(shader);
      return shader;
    };
    const program = gl.createProgram();
    gl.attachShader(program, compile(gl.VERTEX_SHADER,
      'attribute vec2 p;attribute vec3 c;varying vec3 v;void main(){v=c;gl_Position=vec4(p,0.0,1.0);}'));
    gl.attachShader(program, compile(gl.FRAGMENT_SHADER,
      'precision mediump float;varying vec3 v;void main(){gl_FragColor=vec4(v*sin(v*9.0)+0.2,1.0);}'));
    gl.linkProgram(program);
    if (!gl.getProgramParameter(program, gl.LINK_STATUS)) return null;
    gl.useProgram(program);
    // x, y, r, g, b per vertex: two overlapping triangles with odd coordinates, to exercise
    // rasterisation and colour interpolation.
    const vertices = new Float32Array([
      -0.9, -0.8, 1.0, 0.1, 0.3, 0.85, -0.6, 0.2, 0.9, 0.1, -0.2, 0.95, 0.3, 0.2, 1.0,
      -0.7, 0.7, 0.9, 0.8, 0.0, 0.6, 0.55, 0.0, 0.5, 0.7, 0.1, -0.85, 0.4, 0.8, 0.9,
    ]);
    gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer());
    gl.bufferData(gl.ARRAY_BUFFER, vertices, gl.STATIC_DRAW);
    const p = gl.getAttribLocation(program, 'p');
    const c = gl.getAttribLocation(program, 'c');
    gl.enableVertexAttribArray(p);
    gl.vertexAttribPointer(p, 2, gl.FLOAT, false, 20, 0);
    gl.enableVertexAttribArray(c);
    gl.vertexAttribPointer(c, 3, gl.FLOAT, false, 20, 8);
    gl.viewport(0, 0, gl.drawingBufferWidth, gl.drawingBufferHeight);
    gl.clearColor(0.05, 0.1, 0.15, 1);
    gl.clear(gl.COLOR_BUFFER_BIT);
    gl.drawArrays(gl.TRIANGLES, 0, 6);
    // Read back in the same task as the draw: without preserveDrawingBuffer the buffer is only
    // guaranteed until the frame is composited.
    const pixels = new Uint8Array(gl.drawingBufferWidth * gl.drawingBufferHeight * 4);
    gl.readPixels(0, 0, gl.drawingBufferWidth, gl.drawingBufferHeight, gl.RGBA, gl.UNSIGNED_BYTE, pixels);
    return pixels;
  }

  // The parameters hash and the scene's come from the worker (a 64x64 OffscreenCanvas, as the
  // page's canvas), off the main thread; the page reads them itself only when the worker could not.
  const probeWebglRender = {
    name: 'webgl_render',
    budgetMs: WORKER_BUDGET_MS + 100,
    offMainThread: true,
    members: ['rendering.webgl_parameters_hash', 'rendering.webgl_hash'],
    async run(env, signal) {
      const fromWorker = (env.withWorker ? await until(env.workerGpu, now() + WORKER_BUDGET_MS, null, signal) : null) || {};
      let parametersHash = fromWorker.parametersHash || null;
      let hash = fromWorker.hash || null;
      // Each one the worker could not give, the page reads from its own context.
      const gl = parametersHash && hash ? null : env.webgl();
      if (gl && !parametersHash) {
        parametersHash = await sha256Hex(utf8(webglParameterLines(gl)));
        await yieldToMain();
      }
      if (gl && !hash) {
        const pixels = renderWebglScene(gl);
        hash = pixels ? await sha256Hex(pixels) : null;
      }
      return { 'rendering.webgl_parameters_hash': parametersHash, 'rendering.webgl_hash': hash };
    },
  };

  const probeCanvas = {
    name: 'canvas',
    budgetMs: 100,
    members: ['rendering.canvas_hash'],
    async run() {
      const canvas = global.document.createElement('canvas');
      canvas.width = 240;
      canvas.height = 60;
      // willReadFrequently keeps the canvas on the CPU, so getImageData needs no GPU readback.
      const ctx = canvas.getContext('2d', { willReadFrequently: true });
      if (!ctx) return {};
      // Text in system fonts, an emoji, blending and curves: font stacks, hinting, emoji sets and
      // anti-aliasing all show in the pixels.
      ctx.textBaseline = 'alphabetic';
      ctx.fillStyle = '#f60';
      ctx.fillRect(125, 1, 62, 20);
      ctx.fillStyle = '#069';
      ctx.font = '11pt "Times New Roman"';
      ctx.fillText('Vigil <canvas> 1.0 \u{1F50D} \u00e9\u00df\u4e2d', 2, 15);
      ctx.fillStyle = 'rgba(102, 204, 0, 0.7)';
      ctx.font = '18pt Arial';
      ctx.fillText('Cwm fjordbank glyphs vext quiz', 4, 45);
      ctx.globalCompositeOperation = 'multiply';
      for (const [color, x] of [['#f2f', 40], ['#2ff', 80], ['#ff2', 60]]) {
        ctx.fillStyle = color;
        ctx.beginPath();
        ctx.arc(x, 30, 25, 0, Math.PI * 2, true);
        ctx.closePath();
        ctx.fill();
      }
      ctx.beginPath();
      ctx.arc(200, 30, 20, 0, Math.PI * 2, true);
      ctx.arc(200, 30, 8, 0, Math.PI * 2, true);
      ctx.fill('evenodd');
      await yieldToMain();
      const pixels = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      return { 'rendering.canvas_hash': await sha256Hex(pixels) };
    },
  };

  /**
   * The session's challenge (collect.md §1): the server's fresh nonce, drawn as text on a canvas
   * and hashed with its pixels, so the probes batch carries a value made after this session
   * opened, by the page's own rendering engine. A batch recorded from another session carries
   * another session's nonce.
   */
  async function answerChallenge(nonce) {
    if (typeof nonce !== 'string' || !nonce) return null;
    let render = null;
    try {
      const canvas = global.document.createElement('canvas');
      canvas.width = 200;
      canvas.height = 24;
      const ctx = canvas.getContext('2d', { willReadFrequently: true });
      if (ctx) {
        ctx.fillStyle = '#123';
        ctx.font = '14px monospace';
        ctx.fillText(nonce, 2, 17);
        const pixels = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
        const bound = new Uint8Array(nonce.length + pixels.length);
        bound.set(utf8(nonce), 0);
        bound.set(pixels, nonce.length);
        render = await sha256Hex(bound);
      }
    } catch (_) { /* no canvas: the nonce alone still dates the batch */ }
    return { nonce, render };
  }

  // The classic OfflineAudioContext fingerprint: a triangle wave through a compressor. Rendering
  // runs on the audio thread, not the main one; we only hash the settled tail of the signal.
  const probeAudio = {
    name: 'audio',
    budgetMs: 200,
    offMainThread: true, // rendering happens on the audio thread
    members: ['rendering.audio_hash'],
    async run() {
      const Offline = global.OfflineAudioContext || global.webkitOfflineAudioContext;
      if (typeof Offline !== 'function') return {};
      const context = new Offline(1, 5000, 44100);
      const oscillator = context.createOscillator();
      oscillator.type = 'triangle';
      oscillator.frequency.value = 10000;
      const compressor = context.createDynamicsCompressor();
      compressor.threshold.value = -50;
      compressor.knee.value = 40;
      compressor.ratio.value = 12;
      compressor.attack.value = 0;
      compressor.release.value = 0.25;
      oscillator.connect(compressor);
      compressor.connect(context.destination);
      oscillator.start(0);
      const buffer = await new Promise((resolve, reject) => {
        // Old Safari only has the oncomplete callback form.
        context.oncomplete = (e) => resolve(e.renderedBuffer);
        const promise = context.startRendering();
        if (promise && typeof promise.then === 'function') promise.then(resolve, reject);
      });
      const samples = buffer.getChannelData(0).slice(4500, 5000);
      return { 'rendering.audio_hash': await sha256Hex(new Uint8Array(samples.buffer)) };
    },
  };

  // ───────────────────────────── Probes: screen, locale, storage ─────────────────────────────

  const probeScreen = {
    name: 'screen',
    budgetMs: 60,
    members: [
      'screen.width', 'screen.height', 'screen.avail_width', 'screen.avail_height', 'screen.color_depth',
      'screen.pixel_ratio', 'screen.touch', 'screen.orientation', 'screen.media_matches',
    ],
    async run() {
      const s = global.screen || {};
      return {
        'screen.width': attempt(() => s.width),
        'screen.height': attempt(() => s.height),
        'screen.avail_width': attempt(() => s.availWidth),
        'screen.avail_height': attempt(() => s.availHeight),
        'screen.color_depth': attempt(() => s.colorDepth),
        'screen.pixel_ratio': attempt(() => global.devicePixelRatio),
        // Touch support as the page sees it: touch events exist or the device reports touch points.
        'screen.touch': attempt(() => 'ontouchstart' in global || (global.navigator.maxTouchPoints || 0) > 0, false),
        // A real display's orientation follows its sides; the DevTools protocol's viewport
        // emulation sets its own (Puppeteer's viewports say portrait on a landscape screen).
        'screen.orientation': attempt(() => (s.orientation && typeof s.orientation.type === 'string' ? s.orientation.type : null)),
        // Whether CSS sees the same screen as script: emulation changes both, while privacy
        // tools that farble `screen` in script leave the media queries on the real one.
        'screen.media_matches': attempt(() => global.matchMedia(
          '(device-width: ' + s.width + 'px) and (device-height: ' + s.height + 'px)').matches),
      };
    },
  };

  /**
   * The realm's IANA time zone and its default locale, as [zone, locale] (null where unknown).
   * A `DateTimeFormat` would give both, but the first one made in a realm loads the calendar and
   * number data (20-25 ms on a small machine). `Temporal.Now` reads the same zone, and
   * `PluralRules` resolves the default locale, for well under a millisecond together; it resolves
   * against its own list of locales, so its region may differ from `DateTimeFormat`'s, never its
   * language (all the processor compares). `DateTimeFormat` stays the fallback for browsers
   * without them. Self-contained (its source also runs in the worker), so it names nothing from
   * the SDK.
   */
  function zoneAndLocale() {
    const read = (f) => { try { return f() || null; } catch (_) { return null; } };
    let zone = read(() => (typeof Temporal === 'object' ? Temporal.Now.timeZoneId() : null));
    let locale = read(() => new Intl.PluralRules().resolvedOptions().locale);
    if (!zone || !locale) {
      const options = read(() => Intl.DateTimeFormat().resolvedOptions()) || {};
      zone = zone || options.timeZone || null;
      locale = locale || options.locale || null;
    }
    return [zone, locale];
  }

  // The worker sends the IANA zone and locale with its navigator; the page reads them itself
  // only where the worker could not give them. The offset is always the page's own (a page-level time-zone
  // spoof then disagrees with the worker's zone).
  const probeLocale = {
    name: 'locale',
    budgetMs: WORKER_BUDGET_MS + 100,
    offMainThread: true,
    members: ['locale.timezone', 'locale.timezone_offset_min', 'locale.intl_locale'],
    async run(env, signal) {
      // Date#getTimezoneOffset unchanged: minutes from local time to UTC, positive west of UTC.
      const offset = attempt(() => new Date().getTimezoneOffset());
      let resolved = env.withWorker ? await until(env.workerLocale, now() + WORKER_BUDGET_MS, null, signal) : null;
      if (!resolved || !resolved[0]) resolved = zoneAndLocale();
      return {
        'locale.timezone': resolved[0] || null,
        'locale.timezone_offset_min': offset,
        'locale.intl_locale': resolved[1] || null,
      };
    },
  };

  function storageWorks(getStorage) {
    return attempt(() => {
      const storage = getStorage();
      const probeKey = '__vigil_probe__';
      storage.setItem(probeKey, '1');
      storage.removeItem(probeKey);
      return true;
    }, false);
  }

  const probeStorage = {
    name: 'storage',
    budgetMs: 60,
    members: [
      'storage.cookies_enabled', 'storage.local_storage', 'storage.session_storage', 'storage.indexed_db',
      'storage.service_worker',
    ],
    async run() {
      return {
        'storage.cookies_enabled': attempt(() => global.navigator.cookieEnabled, false),
        'storage.local_storage': storageWorks(() => global.localStorage),
        'storage.session_storage': storageWorks(() => global.sessionStorage),
        'storage.indexed_db': attempt(() => Boolean(global.indexedDB), false),
        // Availability only; the SDK keeps no token in a service worker yet (out of scope for now).
        'storage.service_worker': attempt(() => 'serviceWorker' in global.navigator, false),
      };
    },
  };

  // ───────────────────────────── Visitor token ─────────────────────────────

  const IDB_NAME = 'vigil';
  const IDB_STORE = 'kv';
  const IDB_WAIT_MS = 60; // IndexedDB can be slow to open the first time; the other places count anyway
  const TOKEN_SHAPE = /^[\x21-\x7e]{1,1024}$/; // printable ASCII: tokens are opaque but not arbitrary

  function openTokenDb() {
    return new Promise((resolve, reject) => {
      const req = global.indexedDB.open(IDB_NAME, 1);
      req.onupgradeneeded = () => req.result.createObjectStore(IDB_STORE);
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
      req.onblocked = () => reject(new Error('blocked'));
    });
  }

  async function idbGet(key) {
    const db = await openTokenDb();
    try {
      return await new Promise((resolve, reject) => {
        const req = db.transaction(IDB_STORE, 'readonly').objectStore(IDB_STORE).get(key);
        req.onsuccess = () => resolve(req.result);
        req.onerror = () => reject(req.error);
      });
    } finally {
      db.close();
    }
  }

  async function idbPut(key, value) {
    const db = await openTokenDb();
    try {
      await new Promise((resolve, reject) => {
        const tx = db.transaction(IDB_STORE, 'readwrite');
        tx.objectStore(IDB_STORE).put(value, key);
        tx.oncomplete = resolve;
        tx.onerror = () => reject(tx.error);
        tx.onabort = () => reject(tx.error);
      });
    } finally {
      db.close();
    }
  }

  function readCookie(name) {
    const cookies = attempt(() => global.document.cookie, '');
    for (const part of cookies.split(';')) {
      const eq = part.indexOf('=');
      if (eq > 0 && part.slice(0, eq).trim() === name) return attempt(() => decodeURIComponent(part.slice(eq + 1).trim()));
    }
    return null;
  }

  /** Reads the token from every place; returns { visitor_token, token_found_in }. */
  async function readVisitorToken() {
    const found = [];
    const consider = (place, value) => {
      if (typeof value === 'string' && TOKEN_SHAPE.test(value)) found.push([place, value]);
    };
    consider('cookies', readCookie(VISITOR_TOKEN_NAME));
    consider('local_storage', attempt(() => global.localStorage.getItem(VISITOR_TOKEN_NAME)));
    if (attempt(() => global.indexedDB)) {
      const fromDb = await settledWithin(idbGet(VISITOR_TOKEN_NAME).catch(() => null), IDB_WAIT_MS);
      consider('indexed_db', fromDb);
    }
    const name = attempt(() => global.name, '');
    if (typeof name === 'string' && name.startsWith(WINDOW_NAME_PREFIX)) consider('window_name', name.slice(WINDOW_NAME_PREFIX.length));
    // The first place in priority order wins (cookie, then localStorage, IndexedDB, window.name);
    // token_found_in lists the places holding that same token, so a place holding another
    // (older, or planted) token does not count as a confirmation.
    const token = found.length ? found[0][1] : null;
    return { visitor_token: token, token_found_in: found.filter(([, v]) => v === token).map(([place]) => place) };
  }

  /** Writes the token to every place; resolves with the places that took it (rejects only for a malformed token). */
  async function writeVisitorToken(token) {
    if (typeof token !== 'string' || !TOKEN_SHAPE.test(token)) {
      throw new VigilError('sdk.invalid_token', 'a visitor token is a non-empty printable ASCII string');
    }
    const stored = [];
    const secure = attempt(() => global.location.protocol === 'https:', false);
    if (attempt(() => {
      global.document.cookie = VISITOR_TOKEN_NAME + '=' + encodeURIComponent(token) + '; Max-Age=' + COOKIE_MAX_AGE_S +
        '; Path=/; SameSite=Lax' + (secure ? '; Secure' : '');
      return readCookie(VISITOR_TOKEN_NAME) === token;
    }, false)) stored.push('cookies');
    if (attempt(() => { global.localStorage.setItem(VISITOR_TOKEN_NAME, token); return true; }, false)) stored.push('local_storage');
    if (attempt(() => global.indexedDB)) {
      try {
        await idbPut(VISITOR_TOKEN_NAME, token);
        stored.push('indexed_db');
      } catch (_) { /* private mode or quota: the other places still hold it */ }
    }
    // window.name belongs to the page: only take it when it is empty or already ours.
    const name = attempt(() => global.name, null);
    if (name === '' || (typeof name === 'string' && name.startsWith(WINDOW_NAME_PREFIX))) {
      if (attempt(() => { global.name = WINDOW_NAME_PREFIX + token; return true; }, false)) stored.push('window_name');
    }
    return stored;
  }

  const probeVisitorToken = {
    name: 'visitor_token',
    budgetMs: 120,
    members: ['storage.visitor_token', 'storage.token_found_in'],
    async run() {
      const { visitor_token, token_found_in } = await readVisitorToken();
      return { 'storage.visitor_token': visitor_token, 'storage.token_found_in': token_found_in };
    },
  };

  // ───────────────────────────── Probes: runtime integrity ─────────────────────────────

  const NATIVE_SOURCE = /^function\s*[\w$.\s[\]]*\(\)\s*\{\s*\[native code\]\s*\}$/;

  function getter(proto, name) {
    return attempt(() => Object.getOwnPropertyDescriptor(proto, name).get);
  }

  /**
   * [label, function, kind]: natives that spoofing tools and anti-detect browsers override.
   * kind "getter" is an accessor on an interface prototype (must reject a foreign receiver),
   * "method" a plain method (has no own `prototype`).
   */
  function integrityTargets() {
    const g = global;
    const targets = [];
    const add = (label, fn, kind) => { if (typeof fn === 'function') targets.push([label, fn, kind]); };
    const NavProto = attempt(() => g.Navigator.prototype);
    for (const name of ['webdriver', 'userAgent', 'appVersion', 'platform', 'vendor', 'languages', 'language',
      'plugins', 'mimeTypes', 'hardwareConcurrency', 'deviceMemory', 'maxTouchPoints', 'userAgentData',
      'connection', 'permissions', 'cookieEnabled', 'productSub']) {
      if (NavProto) add('navigator.' + name + ' getter', getter(NavProto, name), 'getter');
    }
    const ScreenProto = attempt(() => g.Screen.prototype);
    for (const name of ['width', 'height', 'availWidth', 'availHeight', 'colorDepth']) {
      if (ScreenProto) add('screen.' + name + ' getter', getter(ScreenProto, name), 'getter');
    }
    add('Notification.permission getter', attempt(() => getter(g.Notification, 'permission')), 'static');
    const methods = [
      ['Function.prototype.toString', () => Function.prototype.toString],
      ['Permissions.prototype.query', () => g.Permissions.prototype.query],
      ['HTMLCanvasElement.prototype.toDataURL', () => g.HTMLCanvasElement.prototype.toDataURL],
      ['HTMLCanvasElement.prototype.getContext', () => g.HTMLCanvasElement.prototype.getContext],
      ['CanvasRenderingContext2D.prototype.getImageData', () => g.CanvasRenderingContext2D.prototype.getImageData],
      ['CanvasRenderingContext2D.prototype.fillText', () => g.CanvasRenderingContext2D.prototype.fillText],
      ['CanvasRenderingContext2D.prototype.measureText', () => g.CanvasRenderingContext2D.prototype.measureText],
      ['WebGLRenderingContext.prototype.getParameter', () => g.WebGLRenderingContext.prototype.getParameter],
      ['WebGLRenderingContext.prototype.getExtension', () => g.WebGLRenderingContext.prototype.getExtension],
      ['WebGLRenderingContext.prototype.readPixels', () => g.WebGLRenderingContext.prototype.readPixels],
      ['WebGL2RenderingContext.prototype.getParameter', () => g.WebGL2RenderingContext.prototype.getParameter],
      ['AudioBuffer.prototype.getChannelData', () => g.AudioBuffer.prototype.getChannelData],
      ['OfflineAudioContext.prototype.startRendering', () => g.OfflineAudioContext.prototype.startRendering],
      ['AnalyserNode.prototype.getFloatFrequencyData', () => g.AnalyserNode.prototype.getFloatFrequencyData],
      ['Date.prototype.getTimezoneOffset', () => Date.prototype.getTimezoneOffset],
      ['Intl.DateTimeFormat.prototype.resolvedOptions', () => Intl.DateTimeFormat.prototype.resolvedOptions],
      ['Intl.PluralRules.prototype.resolvedOptions', () => Intl.PluralRules.prototype.resolvedOptions],
      ['Temporal.Now.timeZoneId', () => g.Temporal.Now.timeZoneId],
      ['Element.prototype.getClientRects', () => g.Element.prototype.getClientRects],
      ['Element.prototype.getAttributeNames', () => g.Element.prototype.getAttributeNames],
      ['Document.prototype.hasFocus', () => g.Document.prototype.hasFocus],
      ['Performance.prototype.now', () => g.Performance.prototype.now],
      ['NavigatorUAData.prototype.getHighEntropyValues', () => g.NavigatorUAData.prototype.getHighEntropyValues],
      ['Object.getOwnPropertyDescriptor', () => Object.getOwnPropertyDescriptor],
      ['Object.getOwnPropertyNames', () => Object.getOwnPropertyNames],
      ['Reflect.ownKeys', () => Reflect.ownKeys],
    ];
    for (const [label, get] of methods) add(label, attempt(get), 'method');
    return targets;
  }

  /**
   * `pristineToString` is the pristine realm's `Function.prototype.toString` (or null): a page
   * that masks its replacements by patching its own `toString` cannot mask them through it.
   */
  function looksTampered(fn, kind, pristineToString) {
    const source = attempt(() => fnToString.call(fn), '');
    if (!NATIVE_SOURCE.test(source)) return true;
    if (behavesAsProxy(fn)) return true;
    if (pristineToString && !NATIVE_SOURCE.test(attempt(() => pristineToString.call(fn), ''))) return true;
    // A replacement written in JS (and dressed up with a patched toString) usually still has
    // an own `prototype`; native methods and accessors never do.
    if (hasOwn.call(fn, 'prototype')) return true;
    if (kind === 'getter') {
      // Native interface accessors throw a TypeError on a foreign receiver ("Illegal invocation");
      // `get: () => false` does not.
      try {
        fn.call(Object.create(null));
        return true;
      } catch (e) {
        return !(e instanceof TypeError);
      }
    }
    return false;
  }

  /**
   * A function wrapped in a Proxy (how stealth kits replace natives while keeping their
   * `toString`, in every realm they reach) accepts an object that inherits from it as its own
   * prototype: the engine's cycle check stops at a proxy. A real function refuses with a
   * TypeError. (Through an object made from it, not the function itself: puppeteer-extra's
   * proxies trap the direct form and fake the TypeError.) The prototype is put back at once.
   */
  function behavesAsProxy(fn) {
    const proto = Object.getPrototypeOf(fn);
    try {
      Object.setPrototypeOf(fn, Object.create(fn));
    } catch (_) {
      return false;
    }
    try {
      Object.setPrototypeOf(fn, proto);
    } catch (_) {
      /* a proxy that took the first change takes this one */
    }
    return true;
  }

  // Properties that live on Navigator.prototype / Screen.prototype in every engine. An own
  // property on the instance, or a data property where an accessor belongs, is an override.
  const NAVIGATOR_ACCESSORS = ['webdriver', 'userAgent', 'platform', 'languages', 'language', 'plugins', 'mimeTypes',
    'hardwareConcurrency', 'deviceMemory', 'vendor', 'maxTouchPoints', 'appVersion', 'userAgentData', 'connection'];

  function descriptorAnomalies() {
    const anomalies = [];
    const nav = global.navigator;
    if (nav) {
      for (const name of attempt(() => Reflect.ownKeys(nav), [])) anomalies.push('navigator.' + String(name));
      const proto = attempt(() => global.Navigator.prototype);
      if (proto) {
        for (const name of NAVIGATOR_ACCESSORS) {
          const desc = attempt(() => Object.getOwnPropertyDescriptor(proto, name));
          if (desc && hasOwn.call(desc, 'value')) anomalies.push('Navigator.prototype.' + name + ' (data property)');
        }
        // Every current engine defines navigator.webdriver; stealth kits delete it.
        if (!('webdriver' in proto)) anomalies.push('Navigator.prototype.webdriver (absent)');
      }
      if (attempt(() => Object.getPrototypeOf(nav) !== global.Navigator.prototype, false)) anomalies.push('navigator (foreign prototype)');
    }
    if (global.screen) {
      for (const name of attempt(() => Reflect.ownKeys(global.screen), [])) anomalies.push('screen.' + String(name));
    }
    return anomalies.slice(0, 64);
  }

  // Navigator members whose page value is compared with the pristine realm's own getter
  // applied to the same navigator: a getter replaced in the page answers differently.
  const REALM_COMPARED = ['webdriver', 'userAgent', 'appVersion', 'platform', 'vendor', 'languages',
    'hardwareConcurrency', 'deviceMemory', 'maxTouchPoints'];

  function comparable(value) {
    return value !== null && typeof value === 'object' && typeof value.length === 'number' ? Array.from(value).join(',') : value;
  }

  /** The compared members whose page value differs from the pristine getter's: `name`. */
  function realmMismatches(realm) {
    const proto = attempt(() => realm.Navigator.prototype);
    const nav = global.navigator;
    if (!proto || !nav) return null;
    const mismatches = [];
    for (const name of REALM_COMPARED) {
      const get = attempt(() => Object.getOwnPropertyDescriptor(proto, name).get);
      if (typeof get !== 'function') continue;
      const pristine = attempt(() => comparable(get.call(nav)), undefined);
      const page = attempt(() => comparable(nav[name]), undefined);
      if (pristine !== page) mismatches.push(name);
    }
    return mismatches;
  }

  const probeIntegrity = {
    name: 'integrity',
    budgetMs: 100,
    // Last of the set: the pristine realm (a new frame) costs the main thread 10 to 20 ms and
    // slows the page's next tasks; made here, it delays no other probe.
    members: ['integrity.tampered_natives', 'integrity.descriptor_anomalies', 'integrity.realm_mismatches',
      'automation.devtools_console_reads'],
    async run(env) {
      const realm = env.pristine();
      const consoleReads = devtoolsConsoleReads(env);
      const pristineToString = attempt(() => realm.Function.prototype.toString);
      const tampered = [];
      const targets = integrityTargets();
      for (let i = 0; i < targets.length; i++) {
        const [label, fn, kind] = targets[i];
        if (looksTampered(fn, kind, pristineToString)) tampered.push(label);
        if (i === 20) await yieldToMain(); // two short slices instead of one
      }
      return {
        'integrity.tampered_natives': tampered,
        'integrity.descriptor_anomalies': descriptorAnomalies(),
        'integrity.realm_mismatches': realm ? realmMismatches(realm) : null,
        'automation.devtools_console_reads': consoleReads,
      };
    },
  };

  // ───────────────────────────── Probes: headless residue ─────────────────────────────

  /** Resolves after `ms`, or at once when `signal` aborts. */
  function wait(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      if (signal) signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); });
    });
  }

  /** The speech voices, waiting up to `ms` for the browser to load them (they load lazily). */
  async function speechVoices(ms, signal) {
    const synth = global.speechSynthesis;
    if (!synth || typeof synth.getVoices !== 'function') return null;
    let voices = synth.getVoices();
    if (voices.length) return voices.length;
    await Promise.race([
      new Promise((resolve) => synth.addEventListener('voiceschanged', resolve, { once: true })),
      wait(ms, signal),
    ]);
    voices = synth.getVoices();
    return voices.length;
  }

  const RESIDUE_BUDGET_MS = 250;

  // What a headless browser lacks even when its user agent says otherwise: pointing devices,
  // speech voices, media devices. Each alone also describes some real machines (a server, a
  // Linux box without speech), so the processor weighs them only against the claimed platform.
  const probeResidue = {
    name: 'residue',
    budgetMs: RESIDUE_BUDGET_MS + 100, // it keeps what arrived by RESIDUE_BUDGET_MS itself
    offMainThread: true, // waits for the voices and the browser process's device list
    members: ['residue.any_fine_pointer', 'residue.any_hover', 'residue.speech_voices', 'residue.media_devices'],
    async run(env, signal) {
      const media = (query) => attempt(() => global.matchMedia(query).matches);
      const deadline = now() + RESIDUE_BUDGET_MS;
      // Only Windows and macOS are held to having voices and devices (the processor's rule), so
      // only they are asked: the first ask wakes the browser's speech and media-device services,
      // whose work slows the page's own probes by tens of milliseconds on a small machine.
      const asked = attempt(() => /Windows|Macintosh/.test(global.navigator.userAgent), false);
      const devices = asked ? attempt(() => global.navigator.mediaDevices.enumerateDevices()) : null;
      const [voices, list] = await Promise.all([
        asked ? until(attempt(() => speechVoices(150, signal)), deadline, null, signal) : null,
        devices ? until(devices.catch(() => null), deadline, null, signal) : null,
      ]);
      return {
        'residue.any_fine_pointer': media('(any-pointer: fine)'),
        'residue.any_hover': media('(any-hover: hover)'),
        'residue.speech_voices': typeof voices === 'number' ? voices : null,
        'residue.media_devices': Array.isArray(list) ? list.length : null,
      };
    },
  };

  /**
   * Probe order: the ones that mostly wait on another thread (worker, audio, IndexedDB, client
   * hints, permissions) start first so their waits overlap the synchronous ones.
   */
  const PROBES = Object.freeze([
    probeWorker, probeAudio, probeVisitorToken, probeHighEntropy, probePermissions, probeResidue,
    probeAutomation, probeBrowser, probeWebgl, probeWebglRender, probeCanvas,
    probeScreen, probeLocale, probeStorage, probeIntegrity,
  ]);

  // ───────────────────────────── Interactions (collect.md §3.2) ─────────────────────────────

  const POINTER_TYPES = ['pointermove', 'pointerdown', 'pointerup', 'click'];
  const KEY_TYPES = ['keydown', 'keyup'];
  const TOUCH_TYPES = ['touchstart', 'touchmove', 'touchend'];
  const EVENT_TYPES = POINTER_TYPES.concat(KEY_TYPES, ['scroll'], TOUCH_TYPES, ['focus', 'blur']);
  const MOVE_MIN_GAP_MS = 8; // ~120 Hz is plenty to see a path's shape and keeps batches small
  const SCROLL_MIN_GAP_MS = 30;
  const SOFT_CAP = 600; // past this, only discrete events (clicks, keys, focus) are kept
  const HARD_CAP = 900;
  const round2 = (x) => Math.round(x * 100) / 100;

  /** The mark of the element an event reached, when a page marked it for Vigil. */
  const FIELD_MARK = /^[a-z0-9_-]{1,32}$/;
  function fieldOf(target) {
    const marked = target && typeof target.closest === 'function' ? target.closest('[data-vigil-field]') : null;
    const mark = marked && marked.getAttribute('data-vigil-field');
    return mark && FIELD_MARK.test(mark) ? mark : null;
  }

  /**
   * Records what the processor needs to tell a hand from a script — when, where, and whether the
   * browser marks the event trusted — and nothing else: no key values or codes, no form
   * contents, and no targets but the page's own marks (`data-vigil-field="name"` on an element
   * whose input the page wants judged, such as Gate's user code field and Approve button).
   */
  class InteractionRecorder {
    constructor(t0) {
      this.t0 = t0;
      this.events = [];
      this.windowStart = 0;
      this.lastMove = -Infinity;
      this.lastScroll = -Infinity;
      this.handler = (e) => {
        try {
          this.record(e);
        } catch (_) { /* an odd event must never break the page */ }
      };
    }

    start() {
      if (typeof global.addEventListener !== 'function') return;
      // Capture on window sees every event before page handlers can stop it; passive never
      // delays scrolling.
      for (const type of EVENT_TYPES) global.addEventListener(type, this.handler, { capture: true, passive: true });
    }

    stop() {
      if (typeof global.removeEventListener !== 'function') return;
      for (const type of EVENT_TYPES) global.removeEventListener(type, this.handler, { capture: true });
    }

    record(e) {
      const type = e.type;
      // Focus events of elements do not bubble but do reach a capturing window listener: keep
      // only the window's own (the page gaining or losing focus).
      if ((type === 'focus' || type === 'blur') && e.target !== global) return;
      const stamp = typeof e.timeStamp === 'number' && e.timeStamp > 0 && e.timeStamp <= now() + 1000 ? e.timeStamp : now();
      const t = round1(stamp - this.t0);
      const isMove = type === 'pointermove' || type === 'touchmove';
      if (isMove) {
        if (t - this.lastMove < MOVE_MIN_GAP_MS || this.events.length >= SOFT_CAP) return;
        this.lastMove = t;
      }
      if (type === 'scroll') {
        if (t - this.lastScroll < SCROLL_MIN_GAP_MS || this.events.length >= SOFT_CAP) return;
        this.lastScroll = t;
      }
      if (this.events.length >= HARD_CAP) return;
      const event = { t, type };
      if (POINTER_TYPES.includes(type)) {
        event.x = round2(e.clientX);
        event.y = round2(e.clientY);
      } else if (TOUCH_TYPES.includes(type)) {
        const touch = e.changedTouches && e.changedTouches[0];
        if (touch) {
          event.x = round2(touch.clientX);
          event.y = round2(touch.clientY);
        }
      } else if (type === 'scroll') {
        const target = e.target;
        event.y = round2(target === global.document || target === global || !target ? global.scrollY : target.scrollTop);
      }
      event.trusted = e.isTrusted === true;
      if (!isMove && type !== 'scroll') {
        const mark = fieldOf(e.target);
        if (mark) event.field = mark;
      }
      this.events.push(event);
    }

    get size() {
      return this.events.length;
    }

    /** Takes the buffered events as one batch covering [previous end, now]. */
    drain() {
      if (!this.events.length) return null;
      const end = round1(now() - this.t0);
      const batch = { kind: 'interactions', window_ms: [this.windowStart, end], events: this.events };
      this.events = [];
      this.windowStart = end;
      return batch;
    }
  }

  /** Splits a batch until each part's request body fits max_batch_bytes (never splits below one event). */
  function splitToFit(batch, maxBytes) {
    // body = {"seq":N,"ciphertext":"<b64u of plaintext + 16-byte tag>"}
    const bodySize = (b) => Math.ceil(((utf8(JSON.stringify(b)).length + 16) * 4) / 3) + 48;
    if (bodySize(batch) <= maxBytes || batch.events.length <= 1) return [batch];
    const mid = Math.floor(batch.events.length / 2);
    const cut = batch.events[mid].t;
    return splitToFit({ kind: batch.kind, window_ms: [batch.window_ms[0], cut], events: batch.events.slice(0, mid) }, maxBytes)
      .concat(splitToFit({ kind: batch.kind, window_ms: [cut, batch.window_ms[1]], events: batch.events.slice(mid) }, maxBytes));
  }

  // ───────────────────────────── Proven calls (collect.md §1.1) ─────────────────────────────

  /**
   * The calls that act on the session without a batch (pings, the network check, results), each
   * proven with the session's proof key and the next counter. They leave one at a time, in
   * counter order: the server spends each counter once and refuses one not above the last, so
   * two calls racing could otherwise arrive in the wrong order and one be refused.
   */
  class ProvenCalls {
    constructor(conn, sessionId, proofKey) {
      this._conn = conn;
      this._sessionId = sessionId;
      this._proofKey = proofKey;
      this._nextCounter = 1;
      this._chain = Promise.resolve();
    }

    request(method, path, body, options) {
      const run = this._chain.then(async () => {
        const proof = await proveCall(this._proofKey, method, path, this._sessionId, this._nextCounter++);
        return request(this._conn, method, path, body, Object.assign({}, options, { proof }));
      });
      this._chain = run.catch(noop);
      return run;
    }
  }

  // ───────────────────────────── The agent: one collect session ─────────────────────────────

  /** Retries of one sealed batch: the same ciphertext each time, so a lost ack costs nothing. */
  const RETRY_DELAYS_MS = [300, 1200];
  const FATAL_FOR_STREAM = (e) => !e.retryable && e.code !== 'collect.batch_replayed';

  class Agent {
    constructor(conn, session, aesKey, calls, recorder, options) {
      this._conn = conn;
      this._key = aesKey;
      this._calls = calls;
      this._recorder = recorder;
      this._onError = typeof options.onError === 'function' ? options.onError : null;
      this._maxBatchBytes = Number(session.max_batch_bytes) > 0 ? Number(session.max_batch_bytes) : DEFAULT_MAX_BATCH_BYTES;
      this._nextSeq = 1;
      this._unsent = []; // sealed { seq, body } not yet acknowledged, in seq order
      this._chain = Promise.resolve(); // serialises sealing and sending: batches leave in seq order
      this._closedBy = null; // the error after which this session takes no more batches
      this._timer = null;
      this._networkCheck = Promise.resolve(null);
      this._listeners = [];
      this.sessionId = session.id;
      this.expiresAt = session.expires_at || null;
      this.visitorToken = null;
      this.lastError = null;
    }

    /** Flushes pending interactions, then mints the handoff: { handoff, expiresAt, sessionId }. */
    async result() {
      // The network check feeds the decision that `results` makes final: give it a moment.
      await settledWithin(this._networkCheck, NETWORK_CHECK_WAIT_MS);
      try {
        await this._flushInteractions({});
      } catch (e) {
        this._report(e); // a lost interactions batch must not cost the caller the handoff
      }
      this._stopStreaming();
      const data = await this._calls.request('POST', '/v1/collect/sessions/' + encodeURIComponent(this.sessionId) + '/results', {});
      if (typeof data.handoff !== 'string') throw new VigilError('sdk.invalid_response', 'results returned no handoff');
      // The server's signed visitor token, kept for the next visit; storing never costs the
      // handoff.
      if (typeof data.visitor_token === 'string' && data.visitor_token) await this.storeVisitorToken(data.visitor_token).catch((e) => this._report(e));
      return { handoff: data.handoff, expiresAt: data.expires_at || null, sessionId: this.sessionId };
    }

    /** Keeps a server-issued visitor token in every first-party place. Resolves with them. */
    async storeVisitorToken(token) {
      const stored = await writeVisitorToken(token);
      this.visitorToken = token;
      return stored;
    }

    // — batches —

    _enqueue(task) {
      const run = this._chain.then(task);
      this._chain = run.catch(noop);
      return run;
    }

    /** Seals one plaintext with the next seq and sends everything unsent, in order. */
    _sendBatch(plaintext, options) {
      return this._enqueue(async () => {
        if (this._closedBy) throw this._closedBy;
        const seq = this._nextSeq++;
        const ciphertext = await sealBatch(this._key, this.sessionId, seq, plaintext);
        this._unsent.push({ seq, body: JSON.stringify({ seq, ciphertext }) });
        await this._drainUnsent(options || {});
      });
    }

    async _drainUnsent(options) {
      while (this._unsent.length) {
        const head = this._unsent[0];
        try {
          await this._postBatch(head, options);
        } catch (e) {
          if (FATAL_FOR_STREAM(e)) {
            // 410 expired, 413, 422, auth…: this session takes no more batches from us.
            this._unsent = [];
            this._closedBy = e;
            this._stopStreaming();
          }
          // Retryable: keep the sealed batch at the head; the next flush sends it again.
          throw e;
        }
        this._unsent.shift();
      }
    }

    async _postBatch(batch, options) {
      const path = '/v1/collect/sessions/' + encodeURIComponent(this.sessionId) + '/batches';
      for (let attemptNo = 0; ; attemptNo++) {
        try {
          await request(this._conn, 'POST', path, batch.body, { keepalive: options.keepalive });
          return;
        } catch (e) {
          // 409 for this seq: an earlier attempt landed and only its answer was lost.
          if (e.code === 'collect.batch_replayed') return;
          // A page being left cannot wait for retries.
          if (!e.retryable || options.keepalive || attemptNo >= RETRY_DELAYS_MS.length) throw e;
          await sleep(Math.min(e.retryAfterMs || RETRY_DELAYS_MS[attemptNo], 5000));
        }
      }
    }

    _flushInteractions(options) {
      if (this._closedBy) return Promise.resolve();
      const batch = this._recorder.drain();
      if (!batch && !this._unsent.length) return Promise.resolve();
      if (!batch) return this._enqueue(() => this._drainUnsent(options));
      const parts = splitToFit(batch, this._maxBatchBytes);
      return Promise.all(parts.map((part) => this._sendBatch(part, options)));
    }

    // — background work —

    _report(error) {
      this.lastError = error;
      if (this._onError) {
        try {
          this._onError(error);
        } catch (_) { /* the page's handler is its own business */ }
      }
    }

    _startStreaming() {
      this._timer = setInterval(() => {
        if (this._recorder.size || this._unsent.length) this._flushInteractions({}).catch((e) => this._report(e));
      }, INTERACTION_FLUSH_MS);
      // A hidden page may never come back, and `pagehide` may be the last chance: keepalive lets
      // the request outlive the document. (A page frozen in the bfcache keeps its listeners.)
      const flushNow = () => this._flushInteractions({ keepalive: true }).catch((e) => this._report(e));
      const onVisibility = () => { if (global.document.visibilityState === 'hidden') flushNow(); };
      if (global.document && typeof global.document.addEventListener === 'function') {
        global.document.addEventListener('visibilitychange', onVisibility);
        this._listeners.push(() => global.document.removeEventListener('visibilitychange', onVisibility));
      }
      if (typeof global.addEventListener === 'function') {
        global.addEventListener('pagehide', flushNow);
        this._listeners.push(() => global.removeEventListener('pagehide', flushNow));
      }
    }

    _stopStreaming() {
      if (this._timer) clearInterval(this._timer);
      this._timer = null;
      this._recorder.stop();
      for (const remove of this._listeners.splice(0)) attempt(remove);
    }

    /** collect.md §4: open the WebSocket, let the server speak once, then ask for the comparison. */
    _runNetworkCheck(token) {
      const check = async () => {
        await openNetworkCheckSocket(this._conn.endpoint, this.sessionId, token);
        return this._calls.request('POST', '/v1/collect/network-checks', { session_id: this.sessionId });
      };
      this._networkCheck = check().catch((e) => {
        this._report(e);
        return null;
      });
    }
  }

  /** Resolves (never rejects) once the server's one message or close arrived, or after a wait. */
  function openNetworkCheckSocket(endpoint, sessionId, token) {
    return new Promise((resolve) => {
      if (typeof global.WebSocket !== 'function') return resolve(false);
      let socket;
      let done = false;
      const finish = (ok) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        attempt(() => socket.close());
        resolve(ok);
      };
      const timer = setTimeout(() => finish(false), NETWORK_CHECK_WAIT_MS);
      try {
        const url = endpoint.replace(/^http/, 'ws') + '/v1/collect/ws?session=' + encodeURIComponent(sessionId) +
          '&token=' + encodeURIComponent(token || '');
        socket = new global.WebSocket(url);
      } catch (_) {
        return finish(false);
      }
      socket.onmessage = () => finish(true);
      socket.onclose = () => finish(false);
      socket.onerror = () => finish(false);
    });
  }

  // ───────────────────────────── Vigil.load ─────────────────────────────

  function normalizeOptions(options) {
    const opts = options && typeof options === 'object' ? options : {};
    const key = opts.key;
    if (typeof key !== 'string' || !key) throw new VigilError('sdk.invalid_options', 'Vigil.load needs { key: "pk_…" }');
    const secretKey = /^sk_/.test(key);
    if (!secretKey && !/^pk_/.test(key)) throw new VigilError('sdk.invalid_options', 'key must be a publishable key (pk_live_… or pk_test_…)');
    const raw = opts.endpoint || SCRIPT_ORIGIN;
    const url = attempt(() => new URL(raw));
    if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:')) {
      throw new VigilError('sdk.invalid_options', 'endpoint must be an http(s) URL');
    }
    // Vigil's own consent page opens its session with the one-time ticket it was served with.
    const ticket = typeof opts.consentTicket === 'string' && opts.consentTicket ? opts.consentTicket : null;
    return { key, secretKey, endpoint: (url.origin + url.pathname).replace(/\/+$/, ''), onError: opts.onError, ticket };
  }

  /** The page's URL without query or fragment: those often carry tokens and personal data. */
  function pageUrl() {
    return attempt(() => global.location.protocol + '//' + global.location.host + global.location.pathname);
  }

  /**
   * The pings, one after another (the server's arrival gaps must each contain a whole round
   * trip). They run while the probes still hold the main thread, so each round trip is read from
   * the browser's Resource Timing entry (network time, however late the page's script got to the
   * response), and from the script's own clock only where the browser keeps no entry.
   */
  async function runPings(calls, pingIds) {
    const rtts = [];
    for (const id of Array.isArray(pingIds) ? pingIds : []) {
      const timing = {};
      const path = '/v1/collect/pings/' + encodeURIComponent(id);
      // Timed from when the request leaves, so making its proof is not counted as network.
      await calls.request('GET', path, undefined, { timing });
      const entry = attempt(() => global.performance.getEntriesByName(calls._conn.endpoint + path, 'resource').pop());
      rtts.push(round1(entry && entry.responseEnd > 0 ? entry.responseEnd - entry.startTime : timing.headersAt - timing.sentAt));
    }
    return rtts;
  }

  /**
   * A secret key in a page is already exposed: anyone who reads the page has it. Rather than
   * leave it live for a scraper, the SDK presents it once on a browser route, where the server
   * revokes it on the spot (docs/architecture.md#exposed-keys), and rejects with the server's
   * `auth.key_exposed`.
   */
  async function reportSecretKey(opts) {
    await request({ key: opts.key, endpoint: opts.endpoint }, 'POST', '/v1/collect/sessions', {});
    throw new VigilError('sdk.secret_key_in_browser', 'a secret key must never reach a browser; use a publishable pk_ key');
  }

  async function load(options) {
    const opts = normalizeOptions(options);
    if (opts.secretKey) return reportSecretKey(opts);
    if (!subtle()) {
      throw new VigilError('sdk.unsupported', 'WebCrypto is unavailable (the page must be a secure context: https or localhost)');
    }
    const conn = { key: opts.key, endpoint: opts.endpoint };
    const t0 = now();
    const phases = {}; // ms since load() for each step: the SDK's cost, for benchmarks (not sent)
    const mark = (name) => { phases[name] = round1(now() - t0); };
    const recorder = new InteractionRecorder(t0);
    recorder.start(); // from the first moment: early input is the most telling
    // The probes need no session: start them first, so the ones that wait on the browser
    // process or other threads are under way while the key pair and the session are made.
    const probes = startProbes(PROBES, PROBES_TOTAL_BUDGET_MS);
    try {
      const keyPair = await generateKeyPair();
      const publicRaw = await exportPublicKey(keyPair.publicKey);
      mark('key_pair');
      const opening = {
        client_public_key: b64uEncode(publicRaw),
        sdk_version: SDK_VERSION,
        page_url: pageUrl(),
      };
      if (opts.ticket) opening.consent_ticket = opts.ticket;
      const session = await request(conn, 'POST', '/v1/collect/sessions', opening);
      mark('session_opened');
      // When the session opened on this page's clock, which the interaction windows count from
      // the load: the server holds every window's claimed time against its own since the open.
      const openedInMs = round1(now() - t0);
      if (!session || typeof session.id !== 'string') throw new VigilError('sdk.invalid_response', 'session has no id');
      const { batchKey, proofKey } = await deriveSessionKeys(keyPair.privateKey, b64uDecode(session.server_public_key), session.id);
      const calls = new ProvenCalls(conn, session.id, proofKey);
      // The pings overlap the probes: their round trips come from Resource Timing (network
      // time), so the probes' hold on the main thread does not count in them.
      const pinging = runPings(calls, session.pings);
      pinging.catch(noop); // handled below, once the probes are launched; not "unhandled" meanwhile
      const challenged = answerChallenge(session.challenge).catch(() => null);
      await probes.launched;
      mark('probes_launched');
      const rtts = await pinging;
      mark('pinged');
      const { observations, timedOut, collectedInMs, timings } = await probes.finished;
      mark('probes_finished');
      const agent = new Agent(conn, session, batchKey, calls, recorder, opts);
      agent.visitorToken = (observations.storage && observations.storage.visitor_token) || null;
      const challenge = await challenged;
      await agent._sendBatch(Object.assign(
        { kind: 'probes', collected_in_ms: collectedInMs, opened_in_ms: openedInMs, timed_out: timedOut },
        observations,
        { network: { ping_rtts_ms: rtts } },
        challenge ? { challenge } : {}
      ));
      mark('probes_acknowledged');
      agent.loadTimings = { phases, probes: timings };
      agent._runNetworkCheck(session.network_check_token);
      agent._startStreaming();
      return agent;
    } catch (e) {
      recorder.stop();
      throw e instanceof VigilError ? e : new VigilError('sdk.internal', String((e && e.message) || e));
    } finally {
      // In a task of its own once `load` has settled: the page has its answer first.
      setTimeout(probes.release, 0);
    }
  }

  // ───────────────────────────── Public surface ─────────────────────────────

  global.Vigil = Object.freeze({
    version: SDK_VERSION,
    /** Never throws synchronously: every failure is a rejected promise with a VigilError. */
    load(options) {
      try {
        return load(options);
      } catch (e) {
        return Promise.reject(e);
      }
    },
    VigilError,
    // Pure helpers, exported for the Node tests (test/crypto.test.mjs); not a stable API.
    _internal: Object.freeze({
      utf8, b64uEncode, b64uDecode, hex, sha256Hex, nonceFor, aadFor, generateKeyPair, exportPublicKey,
      deriveSessionKey, deriveSessionKeys, proofMessage, proveCall, sealBatch, openBatch, splitToFit,
      ProvenCalls, collectProbes, readVisitorToken, writeVisitorToken, PROBES, HKDF_INFO, PROOF_HKDF_INFO,
      SDK_VERSION, webglParameterLines,
    }),
  });
})(typeof window !== 'undefined' ? window : globalThis);
