// What the recorder's scripts share to run Chromium as a person does: a virtual display, a plain
// launch with no automation client attached, and input through the X server (xdotool), which the
// browser receives as a real device's. drive.mjs (the detection matrix) and person.mjs (a person
// deciding on Gate's consent page) use it.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CHROMIUM = process.env.VIGIL_CHROMIUM || '/usr/bin/chromium';
export const CHROMEDRIVER = process.env.VIGIL_CHROMEDRIVER || '/usr/bin/chromedriver';

// The flags every launch needs on these machines: no sandbox as root, and no background
// networking (the closed network refuses it).
export const BASE_FLAGS = [
  '--no-sandbox',
  '--disable-quic',
  '--no-first-run',
  '--no-default-browser-check',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--enable-unsafe-swiftshader',
  '--password-store=basic',
];

/** A virtual X display (Xvfb) for headful launches; resolves to { display, stop }. */
export function startXvfb() {
  return new Promise((resolve, reject) => {
    const xvfb = spawn('Xvfb', ['-displayfd', '1', '-screen', '0', '1920x1080x24', '-nolisten', 'tcp'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let out = '';
    xvfb.stdout.on('data', (d) => {
      out += d;
      const m = /^(\d+)\n/.exec(out);
      if (m) resolve({ display: `:${m[1]}`, stop: () => xvfb.kill('SIGTERM') });
    });
    xvfb.on('error', reject);
    xvfb.on('exit', (code) => reject(new Error(`Xvfb exited with ${code}`)));
  });
}

/** Runs a command and resolves when it exits (xdotool). */
export function run(cmd, args, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: 'ignore', env });
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(' ')}: ${code}`))));
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A seeded generator, so a recorded run's input can be replayed the same way. */
export function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** Resolves with `promise`'s value, or with `fallback` after `ms`; the timer never holds the process. */
function within(promise, ms, fallback) {
  let timer;
  const late = new Promise((resolve) => { timer = setTimeout(() => resolve(fallback), ms); });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/**
 * Chromium started with `flags` on a fresh profile, no automation client attached; returns
 * { close }. Chromium's helpers (GPU, network, renderers) outlive a killed browser process for a
 * moment and keep writing the profile, so `close` stops the whole process group, waits for the
 * browser to exit, and only then removes the profile (retrying while a helper still closes its
 * files). The group is in a session of its own, so it is also killed if this script exits
 * without closing it (a timeout's `process.exit`, an uncaught error).
 */
export function launchChromium(flags, env = process.env) {
  const profile = mkdtempSync(join(tmpdir(), 'vigil-chromium-'));
  const child = spawn(CHROMIUM, [...BASE_FLAGS, `--user-data-dir=${profile}`, ...flags], {
    stdio: 'ignore', env, detached: true,
  });
  // 'error' instead of 'exit' when the browser could not be started at all.
  const exited = new Promise((resolve) => { child.once('exit', resolve); child.once('error', resolve); });
  const signal = (name) => { try { process.kill(-child.pid, name); } catch (_) { /* gone */ } };
  const killOnExit = () => signal('SIGKILL');
  process.once('exit', killOnExit);
  return {
    close: async () => {
      process.removeListener('exit', killOnExit);
      signal('SIGTERM');
      const stopped = await within(exited.then(() => true), 5000, false);
      signal('SIGKILL');
      if (!stopped && !(await within(exited.then(() => true), 5000, false))) {
        console.error('Chromium did not exit 10 s after it was stopped; removing its profile anyway');
      }
      rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    },
  };
}

/** A person's Chromium: a plain launch on `display`, no automation client attached. */
export function launchPlain(url, display, extraFlags) {
  return launchChromium(['--window-size=1280,900', '--window-position=0,0', ...extraFlags, url],
    { ...process.env, DISPLAY: display });
}

/**
 * A pointer that moves as a hand does, through the X server: curved, eased, uneven steps with
 * pauses. `random` is a seeded generator ([`rng`]); resolves to the new position.
 */
export async function movePointer(env, random, [x, y], [tx, ty]) {
  const steps = 18 + Math.floor(random() * 14);
  const bend = (random() - 0.5) * 160;
  for (let i = 1; i <= steps; i++) {
    const t = i / steps;
    const ease = t * t * (3 - 2 * t);
    const px = x + (tx - x) * ease + Math.sin(Math.PI * t) * bend + (random() - 0.5) * 3;
    const py = y + (ty - y) * ease + Math.sin(Math.PI * t) * bend * 0.4 + (random() - 0.5) * 3;
    await run('xdotool', ['mousemove', String(Math.round(px)), String(Math.round(py))], env);
    await sleep(6 + random() * 22);
  }
  return [tx, ty];
}
