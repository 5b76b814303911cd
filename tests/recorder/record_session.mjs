// Records a real visit as a replay attacker does (docs/detection.md#replayed-sessions): a page
// on its own origin wraps `SubtleCrypto.encrypt` before it loads Vigil's SDK, so it keeps a copy
// of every batch's plaintext (and the batch number its additional data names) before the SDK
// seals it. A person uses the page in Debian's Chromium with no automation client, through the X
// server (xdotool), for about nine seconds; the page then asks for its result. Prints one JSON
// line: the session id and the batches, in the order they were sealed.
//
//   node record_session.mjs --api http://127.0.0.1:8080 --key pk_test_…
//
// The replay tests (`tests/it/replays.rs`) run it, then send its batches again with replay.mjs
// and replay.py.

import { createServer } from 'node:http';

import { launchPlain, sleep, startXvfb } from './desktop.mjs';
import { humanInput } from './drive.mjs';

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}

function pageHtml(api, key) {
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>Checkout</title>
<script>
// The attacker's wrapper, in place before the SDK loads: a copy of each plaintext it seals.
window.__sealed = [];
const encrypt = SubtleCrypto.prototype.encrypt;
SubtleCrypto.prototype.encrypt = function (algorithm, key, data) {
  try {
    if (algorithm && algorithm.name === 'AES-GCM' && algorithm.additionalData) {
      const aad = new TextDecoder().decode(algorithm.additionalData);
      window.__sealed.push({ seq: Number(aad.split('.').pop()), plaintext: new TextDecoder().decode(data) });
    }
  } catch (_) { /* recorded or not, the page goes on */ }
  return encrypt.call(this, algorithm, key, data);
};
</script>
<script src="${api}/sdk/v1/vigil.js"></script></head>
<body><h1>Checkout</h1>
<form><label>Email <input id="email" autocomplete="off"></label>
<button id="pay" type="button">Pay</button></form>
<div style="height:2000px"></div>
<script>
(async () => {
  const report = (body) => fetch('/report', { method: 'POST', body: JSON.stringify(body) });
  try {
    const agent = await Vigil.load({ key: ${JSON.stringify(key)}, endpoint: ${JSON.stringify(api)} });
    document.title = 'loaded';
    await new Promise((r) => setTimeout(r, 9000));
    await agent.result();
    await report({ ok: true, session_id: agent.sessionId, batches: window.__sealed });
  } catch (e) {
    await report({ ok: false, message: String((e && e.message) || e) });
  }
})();
</script></body></html>`;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!args.api || !args.key) throw new Error('usage: record_session.mjs --api URL --key pk_…');
  let resolveReport;
  const reported = new Promise((r) => { resolveReport = r; });
  const server = createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/report') {
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => { res.end('ok'); resolveReport(JSON.parse(body)); });
      return;
    }
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end(pageHtml(args.api, args.key));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const xvfb = await startXvfb();
  const browser = launchPlain(`http://127.0.0.1:${server.address().port}/checkout`, xvfb.display, []);
  const timeout = setTimeout(() => {
    console.error('record_session.mjs: no report within 60 s');
    process.exit(2);
  }, 60000);
  try {
    await sleep(1500); // the page loads and Vigil.load starts listening
    await humanInput(xvfb.display);
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
