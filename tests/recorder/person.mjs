// A person deciding on a Gate consent page: Debian's Chromium launched plainly on a virtual
// display (no automation client attached), the pointer moved a little by hand, then, all
// through the X server: Tab to the user code field, the code their tool showed typed key by key
// (to approve), and the decision's button reached with Tab and pressed with Enter. Prints one
// JSON line: the text of the page the browser ends on (read through the X clipboard after the
// decision, so no automation client ever attaches).
//
//   node person.mjs --url 'http://127.0.0.1:8080/gate/consent/gate_…?token=gtc_…' --tabs 4 \
//       --code WDJB-MJHT --then 1
//
// `--tabs` is how many Tab presses reach the code field from the top of the page (the page's
// links come first); `--code`, if given, is typed there; `--then` more Tab presses reach the
// button (Approve, once a code is typed, else Deny). The Gate tests (`tests/src/gate.rs`) run it.
// A hand never moves the same way twice: each run draws its own path and pauses from a fresh
// seed (a fixed one would make a second approval an exact copy of the first, which Vigil's replay
// record rightly reads as a replay). The seed is in the printed line; `--seed N` repeats a run.

import { spawnSync } from 'node:child_process';
import { randomInt } from 'node:crypto';

import { launchPlain, movePointer, rng, run, sleep, startXvfb } from './desktop.mjs';

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}

/** The text of the page shown now: select all, copy, and read the clipboard. */
async function pageText(env) {
  await run('xdotool', ['key', '--clearmodifiers', 'ctrl+a'], env);
  await run('xdotool', ['key', '--clearmodifiers', 'ctrl+c'], env);
  await sleep(150);
  const read = spawnSync('xclip', ['-o', '-selection', 'clipboard'], { env, encoding: 'utf8', timeout: 3000 });
  return read.status === 0 ? read.stdout : '';
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const tabs = Number(args.tabs);
  const then = Number(args.then || 0);
  if (!args.url || !Number.isInteger(tabs) || !Number.isInteger(then)) {
    throw new Error('usage: person.mjs --url URL --tabs N [--code CODE] --then M');
  }
  const seed = args.seed === undefined ? randomInt(2 ** 32) : Number(args.seed);
  const xvfb = await startXvfb();
  const env = { ...process.env, DISPLAY: xvfb.display };
  const browser = launchPlain(args.url, xvfb.display, []);
  const timeout = setTimeout(() => {
    console.error('person.mjs: no outcome within 60 s');
    process.exit(2);
  }, 60000);
  try {
    // The page loads, and Vigil's SDK runs its probes and starts listening.
    await sleep(3000);
    const before = await pageText(env);
    const random = rng(seed);
    let at = [900, 700];
    at = await movePointer(env, random, at, [700, 520]);
    await sleep(200 + random() * 300);
    at = await movePointer(env, random, at, [40, 400]);
    // A click in the page's empty margin: the page has the keyboard, and Tab starts from the
    // top of the page.
    await run('xdotool', ['click', '1'], env);
    for (let i = 0; i < tabs; i++) {
      await sleep(180 + random() * 260);
      await run('xdotool', ['key', 'Tab'], env);
    }
    // The code, key by key, each held a moment, with a person's uneven gaps.
    for (const ch of args.code || '') {
      await sleep(120 + random() * 260);
      const name = ch === '-' ? 'minus' : ch.toLowerCase();
      await run('xdotool', ['keydown', name], env);
      await sleep(50 + random() * 60);
      await run('xdotool', ['keyup', name], env);
    }
    for (let i = 0; i < then; i++) {
      await sleep(220 + random() * 260);
      await run('xdotool', ['key', 'Tab'], env);
    }
    await sleep(250 + random() * 250);
    await run('xdotool', ['key', 'Return'], env);
    // The check answers, the form posts, and the outcome's page loads.
    let text = before;
    for (let i = 0; i < 40 && (text === before || text.includes('Checking this browser')); i++) {
      await sleep(500);
      text = await pageText(env);
    }
    clearTimeout(timeout);
    console.log(JSON.stringify({ text, seed }));
  } finally {
    try {
      await browser.close();
    } finally {
      xvfb.stop();
    }
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
