import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import puppeteer from 'puppeteer-core';
const files = { old: readFileSync('/tmp/vx/vigil_old.js'), new: readFileSync('/tmp/vx/vigil_new.js') };
let resolveReport;
const server = createServer((req, res) => {
  const u = new URL(req.url, 'http://x');
  if (u.pathname === '/sdk.js') { res.setHeader('content-type', 'application/javascript'); return res.end(files[u.searchParams.get('v')]); }
  if (u.pathname === '/report') { let b = ''; req.on('data', (c) => b += c); req.on('end', () => { res.end(); resolveReport(JSON.parse(b)); }); return; }
  res.setHeader('content-type', 'text/html');
  res.end(`<!doctype html><html><head><script src="/sdk.js?v=${u.searchParams.get('v')}"></script></head><body><script>
  const lt = []; new PerformanceObserver((l) => { for (const e of l.getEntries()) lt.push(e.duration); }).observe({ type: 'longtask', buffered: true });
  setTimeout(async () => {
    const t = performance.now();
    const skip = new URL(location.href).searchParams.get('skip'); const r = await Vigil._internal.collectProbes(Vigil._internal.PROBES.filter((p) => p.name !== skip), 150);
    fetch('/report', { method: 'POST', body: JSON.stringify({ ms: performance.now() - t, timed_out: r.timedOut, timings: r.timings, lt, hash: r.observations.rendering && r.observations.rendering.webgl_hash, wr: r.observations.browser && r.observations.browser.worker_webgl_renderer, tz: r.observations.locale }) });
  }, 300);
  </script></body></html>`);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const port = server.address().port;
const VARIANTS = (process.env.VARIANTS || 'old,new').split(',');
const out = Object.fromEntries(VARIANTS.map((v) => [v, []]));
for (let i = 0; i < 7; i++) {
  for (const v of VARIANTS) {
    const browser = await puppeteer.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--disable-gpu', '--enable-unsafe-swiftshader', '--disable-background-networking'] });
    const page = await browser.newPage();
    const reported = new Promise((r) => { resolveReport = r; });
    await page.goto(`http://127.0.0.1:${port}/?v=${v.split(':')[0]}&skip=${v.split(':')[1] || ''}`);
    const r = await reported;
    out[v].push(r);
    await browser.close();
  }
}
for (const v of VARIANTS) {
  const ms = out[v].map((r) => r.ms).sort((a, b) => a - b);
  console.log(v, 'hashes', [...new Set(out[v].map((r) => r.hash))], [...new Set(out[v].map((r) => r.wr))].length, JSON.stringify(out[v][0].tz));
  console.log(v, 'median', ms[3].toFixed(1), 'all', ms.map((x) => x.toFixed(0)).join(' '), 'timed_out', JSON.stringify(out[v].map((r) => r.timed_out)));
  const keys = Object.keys(out[v][0].timings);
  console.log('  ', keys.map((k) => k + ':' + out[v].map((r) => r.timings[k]).sort((a, b) => a - b)[3]).join(' '));
}
server.close();
