// The SDK's crypto against vectors computed independently with pyca/cryptography
// (test/vectors.py → test/vectors.json). Run: node --test ingest/sdk/test/
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import vm from 'node:vm';

// vigil.js is a classic browser script (an IIFE defining window.Vigil): evaluate it as one.
// Node 20 has crypto.subtle, TextEncoder, btoa/atob and performance as globals.
const sdkUrl = new URL('../vigil.js', import.meta.url);
vm.runInThisContext(readFileSync(sdkUrl, 'utf8'), { filename: sdkUrl.pathname });
const { _internal: sdk } = globalThis.Vigil;

const vectors = JSON.parse(readFileSync(new URL('./vectors.json', import.meta.url), 'utf8'));
const { subtle } = globalThis.crypto;

const fromHex = (h) => new Uint8Array(h.match(/../g)?.map((b) => parseInt(b, 16)) ?? []);
const ECDH = { name: 'ECDH', namedCurve: 'P-256' };

async function importPrivate(party) {
  return subtle.importKey('jwk', { ...party.jwk, ext: false }, ECDH, false, ['deriveBits']);
}

async function importPublic(party) {
  const { kty, crv, x, y } = party.jwk;
  return subtle.importKey('jwk', { kty, crv, x, y }, ECDH, true, []);
}

async function rawKeyHex(key) {
  return sdk.hex(await subtle.exportKey('raw', key));
}

test('base64url without padding matches Python, both ways', () => {
  for (const { hex, b64u } of vectors.base64url) {
    assert.equal(sdk.b64uEncode(fromHex(hex)), b64u, `encode ${hex}`);
    assert.equal(sdk.hex(sdk.b64uDecode(b64u)), hex, `decode ${b64u}`);
  }
});

test('base64url decoding rejects what is not base64url', () => {
  for (const bad of ['a', 'ab+c', 'ab/c', 'abc=', 'ab c', 'x====']) {
    assert.throws(() => sdk.b64uDecode(bad), { code: 'sdk.invalid_response' }, bad);
  }
});

test('nonce is 4 zero bytes then seq as 8 bytes big-endian', () => {
  for (const { seq, hex } of vectors.nonces) assert.equal(sdk.hex(sdk.nonceFor(seq)), hex, `seq ${seq}`);
  for (const bad of [0, -1, 1.5, Number.NaN, 2 ** 53, '1']) assert.throws(() => sdk.nonceFor(bad), RangeError);
});

test('additional data is "<sessionId>.<seq>"', () => {
  for (const session of vectors.sessions) {
    for (const batch of session.batches) {
      assert.equal(new TextDecoder().decode(sdk.aadFor(session.session_id, batch.seq)), batch.aad);
    }
  }
});

test('public keys export as the 65-byte uncompressed point Python computed', async () => {
  for (const session of vectors.sessions) {
    for (const party of [session.client, session.server]) {
      const raw = await sdk.exportPublicKey(await importPublic(party));
      assert.equal(raw.length, 65);
      assert.equal(sdk.b64uEncode(raw), party.public_raw_b64u);
    }
  }
});

test('ECDH shared secret and HKDF session key match Python, from either side', async () => {
  for (const session of vectors.sessions) {
    const clientPrivate = await importPrivate(session.client);
    const serverPublic = await subtle.importKey('raw', sdk.b64uDecode(session.server.public_raw_b64u), ECDH, false, []);
    const shared = await subtle.deriveBits({ name: 'ECDH', public: serverPublic }, clientPrivate, 256);
    assert.equal(sdk.hex(shared), session.shared_secret_hex, 'shared secret');

    const clientKey = await sdk.deriveSessionKey(clientPrivate, sdk.b64uDecode(session.server.public_raw_b64u),
      session.session_id, { extractable: true });
    assert.equal(await rawKeyHex(clientKey), session.aes_key_hex, 'key derived by the browser');
    assert.deepEqual(clientKey.algorithm, { name: 'AES-GCM', length: 256 });

    const serverKey = await sdk.deriveSessionKey(await importPrivate(session.server),
      sdk.b64uDecode(session.client.public_raw_b64u), session.session_id, { extractable: true });
    assert.equal(await rawKeyHex(serverKey), session.aes_key_hex, 'key derived by the server side');
  }
});

test('the session id is the HKDF salt: another session derives another key', async () => {
  const [session] = vectors.sessions;
  const key = await sdk.deriveSessionKey(await importPrivate(session.client),
    sdk.b64uDecode(session.server.public_raw_b64u), session.session_id + 'x', { extractable: true });
  assert.notEqual(await rawKeyHex(key), session.aes_key_hex);
});

test('the session key is not extractable by default', async () => {
  const [session] = vectors.sessions;
  const key = await sdk.deriveSessionKey(await importPrivate(session.client),
    sdk.b64uDecode(session.server.public_raw_b64u), session.session_id);
  assert.equal(key.extractable, false);
  await assert.rejects(subtle.exportKey('raw', key));
});

test('a malformed server public key is refused', async () => {
  const [session] = vectors.sessions;
  const priv = await importPrivate(session.client);
  const raw = sdk.b64uDecode(session.server.public_raw_b64u);
  await assert.rejects(sdk.deriveSessionKey(priv, raw.slice(1), session.session_id), { code: 'sdk.invalid_response' });
  const compressedTag = raw.slice();
  compressedTag[0] = 0x02;
  await assert.rejects(sdk.deriveSessionKey(priv, compressedTag, session.session_id), { code: 'sdk.invalid_response' });
  const offCurve = raw.slice();
  offCurve[64] ^= 1;
  await assert.rejects(sdk.deriveSessionKey(priv, offCurve, session.session_id));
});

async function vectorKey(session) {
  return sdk.deriveSessionKey(await importPrivate(session.client), sdk.b64uDecode(session.server.public_raw_b64u),
    session.session_id);
}

test('sealed batches are byte-identical to Python AES-256-GCM output', async () => {
  for (const session of vectors.sessions) {
    const key = await vectorKey(session);
    for (const batch of session.batches) {
      assert.equal(await sdk.sealBatch(key, session.session_id, batch.seq, batch.plaintext), batch.ciphertext_b64u,
        `${session.session_id} seq ${batch.seq}`);
      assert.equal(await sdk.openBatch(key, session.session_id, batch.seq, batch.ciphertext_b64u), batch.plaintext);
    }
  }
});

test('sealing an object seals its JSON text', async () => {
  const [session] = vectors.sessions;
  const key = await vectorKey(session);
  const batch = session.batches[1];
  assert.equal(await sdk.sealBatch(key, session.session_id, batch.seq, JSON.parse(batch.plaintext)), batch.ciphertext_b64u);
});

test('a batch does not open when tampered, renumbered or moved to another session', async () => {
  const [first, second] = vectors.sessions;
  const key = await vectorKey(first);
  const batch = first.batches[1];
  const bytes = sdk.b64uDecode(batch.ciphertext_b64u);
  bytes[3] ^= 0x01;
  await assert.rejects(sdk.openBatch(key, first.session_id, batch.seq, sdk.b64uEncode(bytes)), 'tampered body');
  const tag = sdk.b64uDecode(batch.ciphertext_b64u);
  tag[tag.length - 1] ^= 0x80;
  await assert.rejects(sdk.openBatch(key, first.session_id, batch.seq, sdk.b64uEncode(tag)), 'tampered tag');
  await assert.rejects(sdk.openBatch(key, first.session_id, batch.seq + 1, batch.ciphertext_b64u), 'other seq');
  await assert.rejects(sdk.openBatch(key, second.session_id, batch.seq, batch.ciphertext_b64u), 'other session id');
  await assert.rejects(sdk.openBatch(await vectorKey(second), first.session_id, batch.seq, batch.ciphertext_b64u),
    'other session key');
});

test('the proof key and call proofs match Python, from either side', async () => {
  assert.equal(sdk.PROOF_HKDF_INFO, vectors.proof_hkdf_info);
  for (const session of vectors.sessions) {
    for (const [own, peer] of [[session.client, session.server], [session.server, session.client]]) {
      const { batchKey, proofKey } = await sdk.deriveSessionKeys(await importPrivate(own),
        sdk.b64uDecode(peer.public_raw_b64u), session.session_id, { extractable: true });
      assert.equal(await rawKeyHex(batchKey), session.aes_key_hex);
      assert.equal(await rawKeyHex(proofKey), session.proof_key_hex, 'proof key');
      assert.deepEqual(proofKey.algorithm, { name: 'HMAC', hash: { name: 'SHA-256' }, length: 256 });
      assert.deepEqual(proofKey.usages, ['sign']);
      for (const p of session.proofs) {
        assert.equal(new TextDecoder().decode(sdk.proofMessage(p.method, p.path, session.session_id, p.counter)), p.message);
        assert.equal(await sdk.proveCall(proofKey, p.method, p.path, session.session_id, p.counter), p.proof,
          `${p.method} ${p.path} #${p.counter}`);
      }
    }
  }
});

test('a proof changes with the call, the session and the counter; counters are positive safe integers', async () => {
  const [first, second] = vectors.sessions;
  const keyOf = async (session) => (await sdk.deriveSessionKeys(await importPrivate(session.client),
    sdk.b64uDecode(session.server.public_raw_b64u), session.session_id)).proofKey;
  const key = await keyOf(first);
  const { method, path, counter, proof } = first.proofs[2];
  assert.equal(await sdk.proveCall(key, method, path, first.session_id, counter), proof);
  const others = [
    await sdk.proveCall(key, 'GET', path, first.session_id, counter),
    await sdk.proveCall(key, method, '/v1/collect/network-checks', first.session_id, counter),
    await sdk.proveCall(key, method, path, second.session_id, counter),
    await sdk.proveCall(await keyOf(second), method, path, first.session_id, counter),
  ];
  for (const other of others) assert.notEqual(other.split('.')[1], proof.split('.')[1]);
  assert.notEqual((await sdk.proveCall(key, method, path, first.session_id, counter + 1)).split('.')[1], proof.split('.')[1]);
  assert.equal(key.extractable, false, 'the proof key is not extractable by default');
  for (const bad of [0, -1, 1.5, 2 ** 53]) assert.throws(() => sdk.proofMessage(method, path, first.session_id, bad), RangeError);
});

test('fresh key pairs: 65-byte public point, and both sides derive the same key', async () => {
  const client = await sdk.generateKeyPair();
  const server = await sdk.generateKeyPair();
  assert.equal(client.privateKey.extractable, false);
  const clientRaw = await sdk.exportPublicKey(client.publicKey);
  const serverRaw = await sdk.exportPublicKey(server.publicKey);
  assert.equal(clientRaw.length, 65);
  assert.equal(clientRaw[0], 4);
  const a = await sdk.deriveSessionKey(client.privateKey, serverRaw, 'sid_test', { extractable: true });
  const b = await sdk.deriveSessionKey(server.privateKey, clientRaw, 'sid_test', { extractable: true });
  assert.equal(await rawKeyHex(a), await rawKeyHex(b));
  const sealed = await sdk.sealBatch(a, 'sid_test', 9, 'hello');
  assert.equal(await sdk.openBatch(b, 'sid_test', 9, sealed), 'hello');
});
