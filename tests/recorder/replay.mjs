// Replays a recorded visit (record_session.mjs's output) as a script does, with Node's `fetch`:
// opens a fresh collect session through the Collect API with a browser's headers, proves its
// pings, seals the recorded batches again under the new session's key and asks for the result.
// The SDK's own crypto (vigil.js, run in Node) does the sealing and the proofs, exactly as in a
// page. Prints one JSON line: the new session's id.
//
//   node replay.mjs --api URL --key pk_test_… --recording FILE
//       [--jitter SEED] [--fresh-challenge] [--pace original] [--forwarded-for IP]
//
// --jitter scales each gap between the recorded events by 0.95–1.05 and moves each position by
// up to 2 px (and the probes' own timings by 0.95–1.05); --fresh-challenge writes the new
// session's challenge nonce into the recorded probes, as an attacker who read the SDK would;
// --pace original sends each batch when the recording's clock says it was sent; --forwarded-for
// names the client address (the test server trusts loopback as a proxy).

import { readFileSync } from 'node:fs';
import vm from 'node:vm';

const sdkUrl = new URL('../../ingest/sdk/vigil.js', import.meta.url);
vm.runInThisContext(readFileSync(sdkUrl, 'utf8'), { filename: sdkUrl.pathname });
const sdk = globalThis.Vigil._internal;

/** The headers a desktop Chrome sends on a cross-origin `fetch` from the shop's page. */
const BROWSER_HEADERS = {
  'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36',
  'sec-ch-ua': '"Chromium";v="156", "Not-A.Brand";v="24"',
  'sec-ch-ua-mobile': '?0',
  'sec-ch-ua-platform': '"Linux"',
  'accept': '*/*',
  'accept-language': 'en-US,en;q=0.9',
  'sec-fetch-site': 'cross-site',
  'sec-fetch-mode': 'cors',
  'sec-fetch-dest': 'empty',
};

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, '');
    if (name === 'fresh-challenge') out[name] = true;
    else out[name] = argv[++i];
  }
  return out;
}

/** A seeded generator in [-1, 1). */
function rng(seed) {
  let s = (Number(seed) >>> 0) || 1;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return (s / 2 ** 32) * 2 - 1;
  };
}

/** The recorded batches, jittered when asked (see the header). */
function prepared(batches, jitter) {
  const next = jitter === undefined ? null : rng(jitter);
  return batches.map(({ seq, plaintext }) => {
    const batch = JSON.parse(plaintext);
    if (!next) return { seq, batch };
    const scale = (v) => (typeof v === 'number' ? Math.round(v * (1 + 0.05 * next()) * 10) / 10 : v);
    if (batch.kind === 'probes') {
      batch.collected_in_ms = scale(batch.collected_in_ms);
      if (batch.network && Array.isArray(batch.network.ping_rtts_ms)) batch.network.ping_rtts_ms = batch.network.ping_rtts_ms.map(scale);
    } else if (batch.kind === 'interactions' && Array.isArray(batch.events) && batch.events.length) {
      const original = batch.events.map((e) => e.t);
      let t = original[0];
      batch.events.forEach((event, i) => {
        if (i > 0) t += (original[i] - original[i - 1]) * (1 + 0.05 * next());
        event.t = Math.round(t * 10) / 10;
        if (typeof event.x === 'number') event.x = Math.round(event.x + 2 * next());
        if (typeof event.y === 'number') event.y = Math.round(event.y + 2 * next());
      });
      if (Array.isArray(batch.window_ms)) batch.window_ms = [batch.window_ms[0], Math.max(batch.window_ms[1], t)];
    }
    return { seq, batch };
  });
}

async function call(api, key, method, path, { body, proof, forwardedFor } = {}) {
  const headers = { ...BROWSER_HEADERS, authorization: `Bearer ${key}`, origin: 'https://shop.example' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (proof) headers['vigil-session-proof'] = proof;
  if (forwardedFor) headers['x-forwarded-for'] = forwardedFor;
  const response = await fetch(api + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(answer)}`);
  return answer.data;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!args.api || !args.key || !args.recording) {
    throw new Error('usage: replay.mjs --api URL --key pk_… --recording FILE [--jitter SEED] [--fresh-challenge] [--pace original] [--forwarded-for IP]');
  }
  const recording = JSON.parse(readFileSync(args.recording, 'utf8'));
  const batches = prepared(recording.batches, args.jitter);
  const { api, key } = args;
  const forwardedFor = args['forwarded-for'];
  const pair = await sdk.generateKeyPair();
  const opened = await call(api, key, 'POST', '/v1/collect/sessions', {
    forwardedFor,
    body: {
      client_public_key: sdk.b64uEncode(await sdk.exportPublicKey(pair.publicKey)),
      sdk_version: sdk.SDK_VERSION,
      page_url: 'https://shop.example/checkout',
    },
  });
  const openedAt = Date.now();
  const sid = opened.id;
  const { batchKey, proofKey } = await sdk.deriveSessionKeys(pair.privateKey, sdk.b64uDecode(opened.server_public_key), sid);
  let counter = 1;
  const proven = async (method, path, body) => call(api, key, method, path, {
    body, forwardedFor, proof: await sdk.proveCall(proofKey, method, path, sid, counter++),
  });
  for (const ping of opened.pings) await proven('GET', `/v1/collect/pings/${encodeURIComponent(ping)}`);
  for (const { seq, batch } of batches) {
    if (batch.kind === 'probes' && args['fresh-challenge'] && batch.challenge) batch.challenge.nonce = opened.challenge;
    if (args.pace === 'original' && Array.isArray(batch.window_ms)) {
      const due = batch.window_ms[1] - (Date.now() - openedAt);
      if (due > 0) await sleep(due);
    }
    const ciphertext = await sdk.sealBatch(batchKey, sid, seq, JSON.stringify(batch));
    await call(api, key, 'POST', `/v1/collect/sessions/${encodeURIComponent(sid)}/batches`, {
      forwardedFor, body: { seq, ciphertext },
    });
  }
  const result = await proven('POST', `/v1/collect/sessions/${encodeURIComponent(sid)}/results`, {});
  console.log(JSON.stringify({ session_id: sid, handoff: result.handoff }));
}

main().then(() => process.exit(), (e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
