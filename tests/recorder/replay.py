"""Replays a recorded visit (record_session.mjs's output) as a Python script does, with
`requests` and pyca/cryptography: opens a fresh collect session through the Collect API with a
browser's headers, proves its pings, seals the recorded batches again under the new session's
key (ECDH P-256, HKDF-SHA256, AES-256-GCM, as schemas/collect.md specifies) and asks for the
result. Prints one JSON line: the new session's id.

    python3 replay.py --api URL --key pk_test_... --recording FILE
        [--jitter SEED] [--fresh-challenge] [--forwarded-for IP]

The options mean what they mean to replay.mjs.
"""

import argparse
import base64
import hashlib
import hmac
import json
import random

import requests
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

BROWSER_HEADERS = {
    "User-Agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/156.0.0.0 Safari/537.36",
    "sec-ch-ua": '"Chromium";v="156", "Not-A.Brand";v="24"',
    "sec-ch-ua-mobile": "?0",
    "sec-ch-ua-platform": '"Linux"',
    "Accept": "*/*",
    "Accept-Language": "en-US,en;q=0.9",
    "Origin": "https://shop.example",
    "Sec-Fetch-Site": "cross-site",
    "Sec-Fetch-Mode": "cors",
    "Sec-Fetch-Dest": "empty",
}


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def derive(shared: bytes, session_id: str, info: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, session_id.encode(), info).derive(shared)


def jittered(batches, seed):
    rng = random.Random(seed)
    wobble = lambda: rng.uniform(-1.0, 1.0)  # noqa: E731
    out = []
    for item in batches:
        batch = json.loads(item["plaintext"])
        if batch.get("kind") == "probes":
            if isinstance(batch.get("collected_in_ms"), (int, float)):
                batch["collected_in_ms"] = round(batch["collected_in_ms"] * (1 + 0.05 * wobble()), 1)
            network = batch.get("network") or {}
            if isinstance(network.get("ping_rtts_ms"), list):
                network["ping_rtts_ms"] = [round(v * (1 + 0.05 * wobble()), 1) for v in network["ping_rtts_ms"]]
        elif batch.get("kind") == "interactions" and batch.get("events"):
            events = batch["events"]
            original = [e["t"] for e in events]
            t = original[0]
            for i, event in enumerate(events):
                if i:
                    t += (original[i] - original[i - 1]) * (1 + 0.05 * wobble())
                event["t"] = round(t, 1)
                for axis in ("x", "y"):
                    if isinstance(event.get(axis), (int, float)):
                        event[axis] = round(event[axis] + 2 * wobble())
            if isinstance(batch.get("window_ms"), list):
                batch["window_ms"][1] = max(batch["window_ms"][1], t)
        out.append({"seq": item["seq"], "batch": batch})
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--recording", required=True)
    parser.add_argument("--jitter", type=int)
    parser.add_argument("--fresh-challenge", action="store_true")
    parser.add_argument("--forwarded-for")
    args = parser.parse_args()
    with open(args.recording) as f:
        recording = json.load(f)
    if args.jitter is None:
        batches = [{"seq": b["seq"], "batch": json.loads(b["plaintext"])} for b in recording["batches"]]
    else:
        batches = jittered(recording["batches"], args.jitter)

    http = requests.Session()
    http.headers.update(BROWSER_HEADERS)
    http.headers["Authorization"] = f"Bearer {args.key}"
    if args.forwarded_for:
        http.headers["X-Forwarded-For"] = args.forwarded_for

    def call(method, path, body=None, proof=None):
        headers = {"Vigil-Session-Proof": proof} if proof else {}
        r = http.request(method, args.api + path, json=body, headers=headers, timeout=30)
        if not r.ok:
            raise SystemExit(f"{method} {path}: {r.status_code} {r.text}")
        return r.json()["data"]

    private = ec.generate_private_key(ec.SECP256R1())
    public = private.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    opened = call(
        "POST",
        "/v1/collect/sessions",
        {"client_public_key": b64u(public), "sdk_version": "1.4.0", "page_url": "https://shop.example/checkout"},
    )
    sid = opened["id"]
    server = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64u(opened["server_public_key"]))
    shared = private.exchange(ec.ECDH(), server)
    batch_key = AESGCM(derive(shared, sid, b"vigil/collect/v1"))
    proof_key = derive(shared, sid, b"vigil/collect/v1/proof")
    counter = 1

    def proven(method, path, body=None):
        nonlocal counter
        message = f"{method} {path}\n{sid}\n{counter}".encode()
        proof = f"{counter}.{b64u(hmac.new(proof_key, message, hashlib.sha256).digest())}"
        counter += 1
        return call(method, path, body, proof)

    for ping in opened["pings"]:
        proven("GET", f"/v1/collect/pings/{ping}")
    for item in batches:
        seq, batch = item["seq"], item["batch"]
        if batch.get("kind") == "probes" and args.fresh_challenge and batch.get("challenge"):
            batch["challenge"]["nonce"] = opened["challenge"]
        nonce = seq.to_bytes(12, "big")
        sealed = batch_key.encrypt(nonce, json.dumps(batch).encode(), f"{sid}.{seq}".encode())
        call("POST", f"/v1/collect/sessions/{sid}/batches", {"seq": seq, "ciphertext": b64u(sealed)})
    result = proven("POST", f"/v1/collect/sessions/{sid}/results", {})
    print(json.dumps({"session_id": sid, "handoff": result["handoff"]}))


if __name__ == "__main__":
    main()
