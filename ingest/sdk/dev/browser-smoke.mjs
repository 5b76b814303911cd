// Runs the SDK in headless Chromium against dev/mock-collect.mjs and prints what the server
// received plus the SDK's cost in the page (Vigil.load → probes batch acknowledged, and long-task
// time during it). A development aid, not part of `node --test`:
//   node ingest/sdk/dev/browser-smoke.mjs [--chromium /usr/bin/chromium] [--runs 5] [--delay ms] [--tamper]
// Needs Debian's `chromium`. 127.0.0.1 is a secure context, so WebCrypto is available over http.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createMockCollect, startHttpServer } from './mock-collect.mjs';

const args = process.argv.slice(2);
const opt = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback);
const chromium = opt('--chromium', '/usr/bin/chromium');
const runs = Number(opt('--runs', '1'));
const sdkPath = fileURLToPath(new URL('../vigil.js', import.meta.url));

async function runOnce(mock, port) {
  const profile = mkdtempSync(join(tmpdir(), 'vigil-smoke-'));
  let resolveReport;
  const reported = new Promise((resolve) => { resolveReport = resolve; });
  mock.onReport = resolveReport;
  const child = spawn(chromium, [
    '--headless=new', '--no-sandbox', '--no-first-run', '--disable-extensions', `--user-data-dir=${profile}`,
    `http://127.0.0.1:${port}/smoke.html?delay=${opt('--delay', '0')}&tamper=${args.includes('--tamper') ? 1 : ''}`,
  ], { stdio: 'ignore', detached: true }); // its own process group: the browser's helpers die with it
  const stop = () => { try { process.kill(-child.pid, 'SIGTERM'); } catch (_) { /* already gone */ } };
  process.once('exit', stop);
  const timeout = new Promise((resolve) => setTimeout(() => resolve({ errors: ['no report within 30 s'] }), 30000));
  const report = await Promise.race([reported, timeout]);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  stop();
  await exited;
  process.removeListener('exit', stop);
  try {
    rmSync(profile, { recursive: true, force: true, maxRetries: 5 });
  } catch (_) { /* chromium's last writes raced us; it is a temp dir */ }
  return report;
}

const mock = createMockCollect({ key: 'pk_test_smoke' });
const server = await startHttpServer(mock, { sdkPath, onReport: (r) => mock.onReport && mock.onReport(r) });
const { port } = server.address();
const reports = [];
for (let i = 0; i < runs; i++) reports.push(await runOnce(mock, port));
server.close();

const last = reports.at(-1);
const session = mock.sessions.get(last.session_id);
console.log(JSON.stringify({ report: last, batches: session ? Object.fromEntries(session.batches) : null,
  ws: session && session.ws, network_checked: session && session.networkChecked, results: session && session.results }, null, 2));
if (runs > 1) {
  const loads = reports.map((r) => r.load_ms).filter((x) => typeof x === 'number').sort((a, b) => a - b);
  const blocking = reports.map((r) => r.blocking_ms).filter((x) => typeof x === 'number').sort((a, b) => a - b);
  console.log(`runs=${runs} load_ms median=${loads[loads.length >> 1]?.toFixed(1)} max=${loads.at(-1)?.toFixed(1)} ` +
    `blocking_ms median=${blocking[blocking.length >> 1]?.toFixed(1)} max=${blocking.at(-1)?.toFixed(1)}`);
}
process.exit(last.errors && last.errors.length ? 1 : 0);
