// Drives Debian's Chromium through one visit of a shop page that loads the Vigil SDK, in one of
// the configurations bot operators use (or a normal launch with no automation client), and
// prints what the page reported as one JSON line: the session id, the SDK's load time, and the
// browser's user agent.
//
//   node drive.mjs --api http://127.0.0.1:8080 --key pk_test_... --config puppeteer_stealth_headless
//   node drive.mjs --list
//
// The page is served by this script on its own loopback port (another origin than the API, so
// the SDK's calls cross origins as on a real site). It calls `Vigil.load` by itself, waits
// `dwell` ms (the configuration's input happens then), calls `agent.result()` so the decision
// becomes final, and posts its report back to this script: no configuration needs an automation
// client to read the outcome, so the normal launches run with none attached.
//
// The recorder (`tests/src/bin/record_fixtures.rs`) and the end-to-end detection test
// (`tests/it/detection.rs`) run it.

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

import {
  BASE_FLAGS, CHROMEDRIVER, CHROMIUM, launchChromium, launchPlain, movePointer, rng, run, sleep, startXvfb,
} from './desktop.mjs';

const HEADLESS = ['--headless=new', '--disable-gpu'];

let majorVersion;
/** The installed Chromium's major version (the stealth user agent claims the real one). */
function chromeVersion() {
  if (!majorVersion) {
    const m = /(\d+)\.\d+\.\d+\.\d+/.exec(execFileSync(CHROMIUM, ['--version'], { encoding: 'utf8' }));
    majorVersion = m ? m[1] : '156';
  }
  return majorVersion;
}

/** The user agent a stealth operator presents: desktop Chrome of the real major version. */
function desktopUserAgent(major) {
  return `Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${major}.0.0.0 Safari/537.36`;
}

// ───────────────────────────── the page ─────────────────────────────

function pageHtml(api, key, dwellMs) {
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>Checkout</title>
<script src="${api}/sdk/v1/vigil.js"></script></head>
<body><h1>Checkout</h1>
<form><label>Email <input id="email" autocomplete="off"></label>
<button id="pay" type="button">Pay</button></form>
<div style="height:2000px"></div>
<script>
(async () => {
  const report = (body) => fetch('/report', { method: 'POST', body: JSON.stringify(body) });
  try {
    const t0 = performance.now();
    const agent = await Vigil.load({ key: ${JSON.stringify(key)}, endpoint: ${JSON.stringify(api)} });
    const loadMs = performance.now() - t0;
    document.title = 'loaded';
    await new Promise((r) => setTimeout(r, ${dwellMs}));
    const result = await agent.result();
    await report({ ok: true, session_id: agent.sessionId, load_ms: loadMs, timings: agent.loadTimings, handoff: result.handoff,
      user_agent: navigator.userAgent });
  } catch (e) {
    await report({ ok: false, code: e && e.code, message: String((e && e.message) || e) });
  }
})();
</script></body></html>`;
}

/** Serves the page and waits for its report. */
function startPage(api, key, dwellMs) {
  let resolveReport;
  const reported = new Promise((r) => { resolveReport = r; });
  const server = createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/report') {
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => { res.end('ok'); resolveReport(JSON.parse(body)); });
      return;
    }
    if (req.url.startsWith('/checkout')) {
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end(pageHtml(api, key, dwellMs));
      return;
    }
    res.statusCode = 404;
    res.end();
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({ url: `http://127.0.0.1:${server.address().port}/checkout`, reported, close: () => server.close() });
    });
  });
}

// ───────────────────────────── displays and processes ─────────────────────────────

/**
 * Human-like input through the X server (xdotool): curved, uneven pointer paths with pauses,
 * a click into the field, and typing with irregular gaps. The browser sees trusted OS input and
 * no automation client is attached.
 */
export async function humanInput(display, [dx, dy] = [0, 0]) {
  const env = { ...process.env, DISPLAY: display };
  const random = rng(7);
  // Screen positions for a window at 0,0; `dx`, `dy` follow a window placed elsewhere.
  let at = [300 + dx, 300 + dy];
  const moveTo = async (tx, ty) => {
    at = await movePointer(env, random, at, [tx + dx, ty + dy]);
  };
  await moveTo(620, 410);
  await sleep(240 + random() * 300);
  await moveTo(160, 160);
  await run('xdotool', ['click', '1'], env);
  await sleep(300 + random() * 200);
  for (const ch of 'ana.lima@mail.example') {
    await run('xdotool', ['type', '--delay', '0', ch], env);
    await sleep(60 + random() * 180 + (random() < 0.15 ? 250 : 0));
  }
  await moveTo(480, 260);
  await run('xdotool', ['click', '4'], env); // wheel
  await sleep(150 + random() * 200);
  await moveTo(700, 520);
}

/**
 * Scripted input as careful bot operators write it with Puppeteer or Playwright: stepped pointer
 * moves and typing with randomised gaps, so the rhythm alone does not give it away.
 */
async function scriptedInput(page) {
  const random = rng(11);
  await page.mouse.move(100, 100);
  await page.mouse.move(420, 300, { steps: 25 });
  await page.click('#email');
  for (const ch of 'ana.lima@mail.example') {
    await page.keyboard.type(ch);
    await sleep(50 + random() * 170);
  }
  await page.mouse.move(600, 500, { steps: 20 });
}

/**
 * Input as careful operators write it for a driver patched against DevTools detection: curved,
 * eased paths made of single-step moves to a random point inside each element, presses held
 * for a plausible time, and keystrokes held and spaced with log-normal gaps. Every piece goes
 * through the driver's own input calls (the DevTools protocol's Input domain); the rhythm and
 * the shapes are a person's, which is the point.
 */
export async function carefulInput(page, { wholePixels, field = '#email', text = 'ana.lima@mail.example', button = '#pay', seed = 23 } = {}) {
  const random = rng(seed);
  // The tweak of an operator who read that positions between pixels give a protocol client
  // away: every position rounded to a whole pixel, as a mouse reports it.
  const place = wholePixels ? Math.round : (v) => v;
  const gauss = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const logNormal = (median, sigma) => median * Math.exp(sigma * gauss());
  let at = [180 + random() * 200, 120 + random() * 120];
  await page.mouse.move(place(at[0]), place(at[1]));
  const glide = async ([tx, ty]) => {
    const [x, y] = at;
    const steps = 22 + Math.floor(random() * 16);
    const bend = (random() - 0.5) * 140;
    for (let i = 1; i <= steps; i++) {
      const t = i / steps;
      const ease = t * t * (3 - 2 * t);
      await page.mouse.move(
        place(x + (tx - x) * ease + Math.sin(Math.PI * t) * bend + (random() - 0.5) * 2),
        place(y + (ty - y) * ease + Math.sin(Math.PI * t) * bend * 0.4 + (random() - 0.5) * 2),
      );
      await sleep(6 + random() * 20);
    }
    at = [tx, ty];
  };
  const inside = async (selector) => {
    const box = await (await page.$(selector)).boundingBox();
    return [box.x + box.width * (0.2 + random() * 0.6), box.y + box.height * (0.25 + random() * 0.5)];
  };
  const press = async () => {
    await page.mouse.down();
    await sleep(logNormal(95, 0.3));
    await page.mouse.up();
  };
  await glide([620, 410]);
  await sleep(logNormal(300, 0.4));
  await glide(await inside(field));
  await press();
  await sleep(logNormal(350, 0.3));
  for (const ch of text) {
    await page.keyboard.down(ch);
    await sleep(logNormal(85, 0.35));
    await page.keyboard.up(ch);
    await sleep(logNormal(140, 0.5));
  }
  await glide(await inside(button));
  await press();
}

/**
 * A patched driver's operator who sends keys only, through the driver's keyboard (the DevTools
 * protocol's Input.dispatchKeyEvent), each held and spaced as a person's: Tab to the field,
 * type, Tab to the button and press Enter. The pointer never moves.
 */
export async function carefulKeyboardInput(page, { tabs = 1, text = 'ana.lima@mail.example', seed = 29 } = {}) {
  const random = rng(seed);
  const gauss = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  const logNormal = (median, sigma) => median * Math.exp(sigma * gauss());
  const key = async (name) => {
    await page.keyboard.down(name);
    await sleep(logNormal(85, 0.35));
    await page.keyboard.up(name);
  };
  for (let i = 0; i < tabs; i++) {
    await key('Tab');
    await sleep(logNormal(400, 0.3));
  }
  for (const ch of text) {
    await key(ch);
    await sleep(logNormal(140, 0.5));
  }
  await sleep(logNormal(450, 0.3));
  await key('Tab');
  await sleep(logNormal(350, 0.3));
  await key('Enter');
}

/**
 * A person who only uses the keyboard, through the X server: Tab to the field, type with
 * uneven gaps and each key held, Tab to the button and press Enter. The pointer never moves.
 */
async function keyboardInput(display) {
  const env = { ...process.env, DISPLAY: display };
  const random = rng(19);
  const key = async (name) => {
    await run('xdotool', ['keydown', name], env);
    await sleep(60 + random() * 70);
    await run('xdotool', ['keyup', name], env);
  };
  await key('Tab');
  await sleep(400 + random() * 300);
  for (const ch of 'ana.lima@mail.example') {
    await key(ch === '.' ? 'period' : ch === '@' ? 'at' : ch);
    await sleep(70 + random() * 200 + (random() < 0.15 ? 300 : 0));
  }
  await sleep(500);
  await key('Tab');
  await sleep(300 + random() * 300);
  await key('Return');
}

/** Launches plain Chromium on the page with no automation client (Xvfb required). */
// A privacy extension as anti-fingerprinting tools write them: farbling-style noise on canvas
// and audio reads, from a content script in the page's own world, in every frame.
const FARBLING_SCRIPT = `(() => {
  const flip = (data, step) => { for (let i = 0; i < data.length; i += step) data[i] ^= 1; };
  const getImageData = CanvasRenderingContext2D.prototype.getImageData;
  CanvasRenderingContext2D.prototype.getImageData = function (...args) {
    const image = getImageData.apply(this, args);
    flip(image.data, 97);
    return image;
  };
  const toDataURL = HTMLCanvasElement.prototype.toDataURL;
  HTMLCanvasElement.prototype.toDataURL = function (...args) {
    const context = this.getContext('2d');
    if (context && this.width && this.height) {
      const pixel = getImageData.call(context, 0, 0, 1, 1);
      pixel.data[0] ^= 1;
      context.putImageData(pixel, 0, 0);
    }
    return toDataURL.apply(this, args);
  };
  const getChannelData = AudioBuffer.prototype.getChannelData;
  AudioBuffer.prototype.getChannelData = function (...args) {
    const samples = getChannelData.apply(this, args);
    for (let i = 0; i < samples.length; i += 101) samples[i] += 1e-7 * Math.random();
    return samples;
  };
})();`;

/** Writes the farbling extension to a temporary directory; returns its path. */
function farblingExtension() {
  const dir = mkdtempSync(join(tmpdir(), 'vigil-extension-'));
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({
    manifest_version: 3,
    name: 'Fingerprint noise',
    version: '1.0',
    content_scripts: [{ matches: ['<all_urls>'], js: ['noise.js'], run_at: 'document_start', world: 'MAIN', all_frames: true }],
  }));
  writeFileSync(join(dir, 'noise.js'), FARBLING_SCRIPT);
  return dir;
}

// ───────────────────────────── WebDriver over plain HTTP ─────────────────────────────

async function startChromedriver() {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const child = spawn(CHROMEDRIVER, [`--port=${port}`], { stdio: 'ignore' });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    try {
      const r = await fetch(`${base}/status`);
      if (r.ok) return { base, stop: () => child.kill('SIGKILL') };
    } catch (_) { /* not yet */ }
    await sleep(50);
  }
  throw new Error('chromedriver did not start');
}

async function wd(base, method, path, body) {
  const r = await fetch(base + path, { method, headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body) });
  const json = await r.json();
  if (!r.ok) throw new Error(`WebDriver ${path}: ${JSON.stringify(json)}`);
  return json.value;
}

// Stealth patches as written by hand for WebDriver sessions: hide navigator.webdriver, fake the
// GPU and the core count, and mask the replaced functions' toString.
const HAND_PATCHES = `(() => {
  const fakes = new Map();
  const nativeToString = Function.prototype.toString;
  const mask = (fn, name) => { fakes.set(fn, 'function ' + name + '() { [native code] }'); return fn; };
  Function.prototype.toString = mask(function toString() {
    return fakes.has(this) ? fakes.get(this) : nativeToString.call(this);
  }, 'toString');
  Object.defineProperty(Navigator.prototype, 'webdriver', { get: mask(function () { return false; }, 'get webdriver'), configurable: true });
  Object.defineProperty(Navigator.prototype, 'hardwareConcurrency', { get: mask(function () { return 8; }, 'get hardwareConcurrency'), configurable: true });
  for (const Ctx of [WebGLRenderingContext, WebGL2RenderingContext]) {
    const real = Ctx.prototype.getParameter;
    Ctx.prototype.getParameter = mask(function getParameter(p) {
      if (p === 37445) return 'Google Inc. (NVIDIA)';
      if (p === 37446) return 'ANGLE (NVIDIA, NVIDIA GeForce RTX 3060 Direct3D11 vs_5_0 ps_5_0, D3D11)';
      return real.call(this, p);
    }, 'getParameter');
  }
})();`;

async function webdriverVisit(url, { patches }) {
  const driver = await startChromedriver();
  const profile = mkdtempSync(join(tmpdir(), 'vigil-chromium-'));
  const major = chromeVersion();
  const args = [...BASE_FLAGS, ...HEADLESS, `--user-data-dir=${profile}`, '--window-size=1280,900'];
  if (patches) args.push(`--user-agent=${desktopUserAgent(major)}`);
  let id;
  try {
    const session = await wd(driver.base, 'POST', '/session', {
      capabilities: { alwaysMatch: { browserName: 'chrome', 'goog:chromeOptions': { binary: CHROMIUM, args } } },
    });
    id = session.sessionId;
    if (patches) {
      await wd(driver.base, 'POST', `/session/${id}/goog/cdp/execute`, {
        cmd: 'Page.addScriptToEvaluateOnNewDocument', params: { source: HAND_PATCHES },
      });
    }
    await wd(driver.base, 'POST', `/session/${id}/url`, { url });
    return {
      close: async () => {
        try { await wd(driver.base, 'DELETE', `/session/${id}`); } catch (_) { /* gone */ }
        driver.stop();
        rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
      },
    };
  } catch (e) {
    driver.stop();
    throw e;
  }
}

// ───────────────────────────── CDP clients ─────────────────────────────

async function puppeteerVisit(url, { stealth, evasions, headful, userAgent, display, input }) {
  let launcher;
  if (stealth) {
    const { default: puppeteer } = await import('puppeteer-extra');
    const { default: Stealth } = await import('puppeteer-extra-plugin-stealth');
    // `evasions`: only these of the plugin's evasions (the catalogue of what each leaves).
    puppeteer.use(evasions ? Stealth({ enabledEvasions: new Set(evasions) }) : Stealth());
    launcher = puppeteer;
  } else {
    ({ default: launcher } = await import('puppeteer-core'));
  }
  const browser = await launcher.launch({
    executablePath: CHROMIUM,
    headless: !headful,
    args: [...BASE_FLAGS, '--window-size=1280,900'],
    env: { ...process.env, DISPLAY: display || '' },
  });
  const page = await browser.newPage();
  if (userAgent) await page.setUserAgent(userAgent);
  await page.goto(url);
  if (input) {
    await page.waitForFunction(() => document.title === 'loaded', { timeout: 20000 });
    await scriptedInput(page);
  }
  return { close: () => browser.close() };
}

async function playwrightVisit(url, { headful, display, input }) {
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: !headful,
    args: BASE_FLAGS,
    env: { ...process.env, DISPLAY: display || '' },
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await page.goto(url);
  if (input) {
    await page.waitForFunction(() => document.title === 'loaded', null, { timeout: 20000 });
    await scriptedInput(page);
  }
  return { close: () => browser.close() };
}

// ───────────────────────────── drivers patched against DevTools detection ─────────────────────────────

// rebrowser-puppeteer-core and patchright-core never enable the Runtime domain (so the console
// is not serialised for them) and, launched as their users launch them, pass no automation
// flags: no --enable-automation, AutomationControlled off. Headful under Xvfb.

/** The flags that place a patched driver's window: at Chromium's own place, or at `position`. */
const windowFlags = (position) => ['--window-size=1280,900', ...(position ? [`--window-position=${position}`] : [])];

/** A patched driver's input of `kind`: careful pointer and keys, whole pixels, or keys only. */
async function patchedInput(page, kind) {
  if (kind === 'keyboard') await carefulKeyboardInput(page);
  else await carefulInput(page, { wholePixels: kind === 'whole_pixels' });
}

/**
 * A page of a patched driver (`rebrowser` or `patchright`), headful on `display`, with its
 * default viewport or (`viewport` false) the window's own, the window at `position` if given;
 * resolves to { page, close }.
 */
export async function patchedPage(driver, { display, viewport, position }) {
  if (driver === 'rebrowser') {
    const { default: puppeteer } = await import('rebrowser-puppeteer-core');
    const browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: false,
      ignoreDefaultArgs: ['--enable-automation'],
      args: [...BASE_FLAGS, ...windowFlags(position), '--disable-blink-features=AutomationControlled'],
      env: { ...process.env, DISPLAY: display },
      // Puppeteer's default is an emulated 800x600 viewport; `null` keeps the window's own.
      ...(viewport ? {} : { defaultViewport: null }),
    });
    return { page: await browser.newPage(), close: () => browser.close() };
  }
  const { chromium } = await import('patchright-core');
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: false,
    args: [...BASE_FLAGS, ...windowFlags(position)],
    env: { ...process.env, DISPLAY: display },
  });
  // Playwright's default is an emulated 1280x720 viewport (and screen); `null` keeps the window's.
  const context = await browser.newContext(viewport ? {} : { viewport: null });
  return { page: await context.newPage(), close: () => browser.close() };
}

async function rebrowserVisit(url, { display, viewport, input, position }) {
  const { page, close } = await patchedPage('rebrowser', { display, viewport, position });
  await page.goto(url);
  if (input) {
    await page.waitForFunction(() => document.title === 'loaded', { timeout: 20000 });
    await patchedInput(page, input);
  }
  return { close };
}

async function patchrightVisit(url, { display, viewport, input, position }) {
  const { page, close } = await patchedPage('patchright', { display, viewport, position });
  await page.goto(url);
  if (input) {
    await page.waitForFunction(() => document.title === 'loaded', null, { timeout: 20000 });
    await patchedInput(page, input);
  }
  return { close };
}

/**
 * Headless Chromium with a normal user agent, AutomationControlled off and a remote-debugging
 * port that nothing reads during the visit: a scraper's browser before its client attaches.
 */
function headlessDebugPort(url) {
  return launchChromium(['--headless=new', '--remote-debugging-port=0',
    `--user-agent=${desktopUserAgent(chromeVersion())}`, '--disable-blink-features=AutomationControlled', url]);
}

// ───────────────────────────── configurations ─────────────────────────────

/** Each configuration: whether it needs a display, how long the page dwells, how to launch. */
const CONFIGS = {
  webdriver_headless: { dwell: 500, launch: (url) => webdriverVisit(url, { patches: false }) },
  webdriver_stealth_patches: { dwell: 500, launch: (url) => webdriverVisit(url, { patches: true }) },
  puppeteer_headless: { dwell: 500, launch: (url) => puppeteerVisit(url, {}) },
  puppeteer_headless_desktop_ua: {
    dwell: 500, launch: (url) => puppeteerVisit(url, { userAgent: desktopUserAgent(chromeVersion()) }),
  },
  puppeteer_stealth_headless: { dwell: 3000, launch: (url) => puppeteerVisit(url, { stealth: true, input: true }) },
  puppeteer_stealth_headful: {
    display: true, dwell: 3000,
    launch: (url, display) => puppeteerVisit(url, { stealth: true, headful: true, display, input: true }),
  },
  playwright_headless: { dwell: 3000, launch: (url) => playwrightVisit(url, { input: true }) },
  playwright_headful: {
    display: true, dwell: 3000, launch: (url, display) => playwrightVisit(url, { headful: true, display, input: true }),
  },
  // Headless with a debugging port and no client attached.
  chromium_headless_debug_port: { dwell: 1500, launch: (url) => headlessDebugPort(url) },
  // Drivers patched against DevTools detection, launched idle with their default viewports...
  rebrowser_puppeteer_idle: {
    display: true, dwell: 1500, launch: (url, display) => rebrowserVisit(url, { display, viewport: true }),
  },
  patchright_idle: {
    display: true, dwell: 1500, launch: (url, display) => patchrightVisit(url, { display, viewport: true }),
  },
  // ... and without them (the window's own viewport), acting as careful operators do.
  rebrowser_puppeteer_careful_input: {
    display: true, dwell: 9000, launch: (url, display) => rebrowserVisit(url, { display, input: 'careful' }),
  },
  patchright_careful_input: {
    display: true, dwell: 9000, launch: (url, display) => patchrightVisit(url, { display, input: 'careful' }),
  },
  // The three tweaks that got past the careful input: every position rounded to a whole pixel,
  // the window placed at 0,0 (where Wayland says every window is), and keys only.
  rebrowser_puppeteer_whole_pixels: {
    display: true, dwell: 9000, launch: (url, display) => rebrowserVisit(url, { display, input: 'whole_pixels' }),
  },
  patchright_whole_pixels: {
    display: true, dwell: 9000, launch: (url, display) => patchrightVisit(url, { display, input: 'whole_pixels' }),
  },
  rebrowser_puppeteer_corner_window: {
    display: true, dwell: 9000,
    launch: (url, display) => rebrowserVisit(url, { display, input: 'careful', position: '0,0' }),
  },
  patchright_corner_window: {
    display: true, dwell: 9000,
    launch: (url, display) => patchrightVisit(url, { display, input: 'careful', position: '0,0' }),
  },
  rebrowser_puppeteer_keyboard_only: {
    display: true, dwell: 9000, launch: (url, display) => rebrowserVisit(url, { display, input: 'keyboard' }),
  },
  patchright_keyboard_only: {
    display: true, dwell: 9000, launch: (url, display) => patchrightVisit(url, { display, input: 'keyboard' }),
  },
  // Normal launches: a person's Chromium on a desktop, no automation client attached.
  chromium_headful_idle: { display: true, dwell: 1500, launch: (url, display) => launchPlain(url, display, []) },
  chromium_headful_input: {
    display: true, dwell: 9000, human: true, launch: (url, display) => launchPlain(url, display, []),
  },
  // A person on a machine without a GPU: WebGL in software, input through the X server.
  chromium_no_gpu_input: {
    display: true, dwell: 9000, human: true, launch: (url, display) => launchPlain(url, display, ['--disable-gpu']),
  },
  // A person who only uses the keyboard.
  chromium_keyboard_only: {
    display: true, dwell: 9000, keyboard: true, launch: (url, display) => launchPlain(url, display, []),
  },
  // The same people in a window away from the corner, where the input clock is judged.
  chromium_placed_window_input: {
    display: true, dwell: 9000, human: true, offset: [120, 80],
    launch: (url, display) => launchPlain(url, display, ['--window-position=120,80']),
  },
  chromium_placed_window_keyboard_only: {
    display: true, dwell: 9000, keyboard: true,
    launch: (url, display) => launchPlain(url, display, ['--window-position=120,80']),
  },
  chromium_farbling_extension: {
    display: true, dwell: 9000, human: true,
    launch: (url, display) => {
      const extension = farblingExtension();
      const browser = launchPlain(url, display, [`--load-extension=${extension}`, `--disable-extensions-except=${extension}`]);
      return { close: async () => { await browser.close(); rmSync(extension, { recursive: true, force: true }); } };
    },
  },
  // A phone-sized window with touch input enabled, as a person's browser with a touch screen.
  chromium_mobile_touch: {
    display: true, dwell: 1500,
    launch: (url, display) => launchPlain(url, display, ['--touch-events=enabled', '--window-size=412,915',
      '--force-device-scale-factor=2']),
  },
};

// One configuration per evasion of puppeteer-extra-plugin-stealth, each alone in headless
// Chromium, and one with none: what each evasion changes, and the trace it leaves, is the
// difference between the two (processor/tests/it/stealth_evasions.rs).
const STEALTH_EVASIONS = [
  'chrome.app', 'chrome.csi', 'chrome.loadTimes', 'chrome.runtime', 'defaultArgs', 'iframe.contentWindow',
  'media.codecs', 'navigator.hardwareConcurrency', 'navigator.languages', 'navigator.permissions',
  'navigator.plugins', 'navigator.vendor', 'navigator.webdriver', 'sourceurl', 'user-agent-override',
  'webgl.vendor', 'window.outerdimensions',
];
CONFIGS['stealth_evasion_none'] = { dwell: 300, launch: (url) => puppeteerVisit(url, { stealth: true, evasions: [] }) };
for (const evasion of STEALTH_EVASIONS) {
  CONFIGS[`stealth_evasion_${evasion.replace(/[.-]/g, '_')}`] = {
    dwell: 300, launch: (url) => puppeteerVisit(url, { stealth: true, evasions: [evasion] }),
  };
}

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--list') out.list = true;
    else if (argv[i].startsWith('--')) out[argv[i].slice(2)] = argv[++i];
  }
  return out;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (args.list) {
    console.log(JSON.stringify(Object.keys(CONFIGS)));
    return;
  }
  const config = CONFIGS[args.config];
  if (!config || !args.api || !args.key) {
    throw new Error(`usage: drive.mjs --api URL --key pk_... --config ${Object.keys(CONFIGS).join('|')}`);
  }
  const page = await startPage(args.api, args.key, config.dwell);
  const xvfb = config.display ? await startXvfb() : null;
  let visit;
  const timeout = setTimeout(() => {
    console.error(`${args.config}: no report within 60 s`);
    process.exit(2);
  }, 60000);
  try {
    visit = await config.launch(page.url, xvfb && xvfb.display);
    if (config.human || config.keyboard) {
      await sleep(1500); // the page loads and Vigil.load starts listening
      await (config.human ? humanInput(xvfb.display, config.offset) : keyboardInput(xvfb.display));
    }
    const report = await page.reported;
    clearTimeout(timeout);
    console.log(JSON.stringify({ config: args.config, ...report }));
    if (!report.ok) process.exitCode = 1;
  } finally {
    try {
      if (visit) await visit.close();
    } finally {
      if (xvfb) xvfb.stop();
      page.close();
    }
  }
}

// Run as a script; imported (by consent.mjs), it only lends its drivers and inputs.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(() => process.exit(), (e) => {
    console.error(String((e && e.stack) || e));
    process.exit(1);
  });
}
