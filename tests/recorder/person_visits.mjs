// A person whose visits look alike: Debian's Chromium with no automation client, used through the
// X server (xdotool), on a shop page that loads Vigil's SDK, asks for its result a few seconds
// after loading and reports its session. Either the person reloads the page again and again,
// doing much the same each time, or keeps two tabs of it open and goes back and forth. Prints one
// JSON line: every session, in the order they reported. The replay tests (`tests/it/replays.rs`)
// check that none reads as a replay of another.
//
//   node person_visits.mjs --api URL --key pk_test_… --reloads 10
//   node person_visits.mjs --api URL --key pk_test_… --tabs 2

import { createServer } from 'node:http';

import { launchPlain, movePointer, rng, run, sleep, startXvfb } from './desktop.mjs';

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}

function pageHtml(api, key) {
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>Checkout</title>
<script src="${api}/sdk/v1/vigil.js"></script></head>
<body><h1>Checkout</h1>
<form><label>Email <input id="email" autocomplete="off"></label>
<button id="pay" type="button">Pay</button></form>
<script>
(async () => {
  const report = (body) => fetch('/report', { method: 'POST', body: JSON.stringify(body) });
  try {
    const agent = await Vigil.load({ key: ${JSON.stringify(key)}, endpoint: ${JSON.stringify(api)} });
    await new Promise((r) => setTimeout(r, 4500));
    await agent.result();
    await report({ ok: true, session_id: agent.sessionId });
  } catch (e) {
    await report({ ok: false, message: String((e && e.message) || e) });
  }
})();
</script></body></html>`;
}

/** Much the same each time: the pointer to the field, a click, a few letters. */
async function visitInput(env, random) {
  let at = [500 + random() * 200, 400 + random() * 100];
  at = await movePointer(env, random, at, [180 + random() * 40, 165 + random() * 10]);
  await run('xdotool', ['click', '1'], env);
  for (const ch of 'ana') {
    await sleep(90 + random() * 160);
    await run('xdotool', ['key', ch], env);
  }
  await movePointer(env, random, at, [400 + random() * 100, 300 + random() * 80]);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const reloads = Number(args.reloads || 0);
  const tabs = Number(args.tabs || 1);
  if (!args.api || !args.key || (!reloads && tabs < 2)) {
    throw new Error('usage: person_visits.mjs --api URL --key pk_… (--reloads N | --tabs N)');
  }
  const reports = [];
  let waiting = null;
  const server = createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/report') {
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => {
        res.end('ok');
        reports.push(JSON.parse(body));
        if (waiting) waiting();
      });
      return;
    }
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end(pageHtml(args.api, args.key));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}/checkout`;
  const reportsReach = (n) => new Promise((resolve) => {
    const check = () => { if (reports.length >= n) { waiting = null; resolve(); } };
    waiting = check;
    check();
  });
  const xvfb = await startXvfb();
  const env = { ...process.env, DISPLAY: xvfb.display };
  // Two tabs: the same page twice, the second one in front.
  const browser = launchPlain(url, xvfb.display, tabs > 1 ? [url] : []);
  const timeout = setTimeout(() => {
    console.error(`person_visits.mjs: ${reports.length} reports after 180 s`);
    process.exit(2);
  }, 180000);
  const random = rng(5);
  try {
    if (reloads) {
      for (let i = 0; i < reloads; i++) {
        await sleep(1200); // the page loads and Vigil.load starts listening
        await visitInput(env, random);
        await reportsReach(i + 1);
        if (i + 1 < reloads) await run('xdotool', ['key', 'F5'], env);
      }
    } else {
      // Input in the tab in front, then in the other (Ctrl+Tab), then back, while both wait.
      await sleep(1200);
      await visitInput(env, random);
      await run('xdotool', ['key', 'ctrl+Tab'], env);
      await sleep(300);
      await visitInput(env, random);
      await reportsReach(tabs);
    }
    clearTimeout(timeout);
    console.log(JSON.stringify({ ok: reports.every((r) => r.ok), sessions: reports.map((r) => r.session_id), reports }));
  } finally {
    try {
      await browser.close();
    } finally {
      xvfb.stop();
      server.close();
    }
  }
}

main().then(() => process.exit(), (e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
