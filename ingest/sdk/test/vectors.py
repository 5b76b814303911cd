#!/usr/bin/env python3
"""Independent test vectors for the browser SDK's crypto (schemas/collect.md sections 1, 1.1 and 3).

Computed with pyca/cryptography, not WebCrypto, so test/crypto.test.mjs checks the SDK against a
second implementation of the same contract:
  shared = ECDH P-256 x coordinate
  key    = HKDF-SHA256(ikm = shared, salt = UTF-8 session id, info = "vigil/collect/v1", 32 bytes)
  nonce  = 4 zero bytes || seq as 8 bytes big-endian
  aad    = UTF-8 of "<session id>.<seq>"
  ct     = AES-256-GCM(key, nonce, plaintext, aad), 16-byte tag appended, base64url unpadded
  proof_key = HKDF-SHA256(ikm = shared, salt = UTF-8 session id, info = "vigil/collect/v1/proof", 32)
  proof     = "<counter>." + base64url(HMAC-SHA256(proof_key, "<METHOD> <path>\n<session id>\n<counter>"))

Regenerate with:  python3 ingest/sdk/test/vectors.py > ingest/sdk/test/vectors.json
(needs `pip install cryptography`). The output is deterministic: fixed keys, fixed inputs.
"""

import base64
import hashlib
import hmac
import json
import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

INFO = b"vigil/collect/v1"
PROOF_INFO = b"vigil/collect/v1/proof"
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def fixed_private_key(label: str) -> ec.EllipticCurvePrivateKey:
    """A reproducible private scalar: SHA-256 of a label, reduced into [1, n-1]."""
    scalar = int.from_bytes(hashlib.sha256(label.encode()).digest(), "big") % (P256_ORDER - 1) + 1
    return ec.derive_private_key(scalar, ec.SECP256R1())


def describe(key: ec.EllipticCurvePrivateKey) -> dict:
    numbers = key.private_numbers()
    public = key.public_key()
    return {
        # JWK members, so WebCrypto can import the same private key.
        "jwk": {
            "kty": "EC",
            "crv": "P-256",
            "d": b64u(numbers.private_value.to_bytes(32, "big")),
            "x": b64u(numbers.public_numbers.x.to_bytes(32, "big")),
            "y": b64u(numbers.public_numbers.y.to_bytes(32, "big")),
        },
        "public_raw_b64u": b64u(public.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)),
    }


def nonce(seq: int) -> bytes:
    return b"\x00\x00\x00\x00" + struct.pack(">Q", seq)


def aad(session_id: str, seq: int) -> bytes:
    return f"{session_id}.{seq}".encode()


def derive(shared: bytes, session_id: str, info: bytes = INFO) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=session_id.encode(), info=info).derive(shared)


def proof_message(method: str, path: str, session_id: str, counter: int) -> bytes:
    return f"{method} {path}\n{session_id}\n{counter}".encode()


def main() -> None:
    sessions = []
    for label, session_id in [
        ("vigil-vectors/1", "sid_01j9z3k7w8x2v4q6r5t0m1n3p7"),
        ("vigil-vectors/2", "sid_01jaaaaaaaaaaaaaaaaaaaaaaa"),
    ]:
        client = fixed_private_key(label + "/client")
        server = fixed_private_key(label + "/server")
        shared = client.exchange(ec.ECDH(), server.public_key())
        assert shared == server.exchange(ec.ECDH(), client.public_key())
        key = derive(shared, session_id)
        batches = []
        for seq, plaintext in [
            (1, '{"kind":"probes","collected_in_ms":41.2,"timed_out":["audio"],"network":{"ping_rtts_ms":[31.2,29.8,30.4]}}'),
            (7, '{"kind":"interactions","window_ms":[0,2000],"events":[{"t":12.5,"type":"keydown","trusted":true}]}'),
            (2**32 + 5, '{"kind":"interactions","window_ms":[2000,4000],"events":[]}'),
            (3, ""),
        ]:
            ct = AESGCM(key).encrypt(nonce(seq), plaintext.encode(), aad(session_id, seq))
            batches.append({
                "seq": seq,
                "plaintext": plaintext,
                "nonce_hex": nonce(seq).hex(),
                "aad": aad(session_id, seq).decode(),
                "ciphertext_b64u": b64u(ct),
            })
        proof_key = derive(shared, session_id, PROOF_INFO)
        proofs = []
        for method, path, counter in [
            ("GET", "/v1/collect/pings/png_01j9z3k7w8x2v4q6r5t0m1n3p7", 1),
            ("POST", "/v1/collect/network-checks", 4),
            ("POST", f"/v1/collect/sessions/{session_id}/results", 5),
            ("POST", f"/v1/collect/sessions/{session_id}/results", 2**53 - 1),
        ]:
            message = proof_message(method, path, session_id, counter)
            mac = hmac.new(proof_key, message, hashlib.sha256).digest()
            proofs.append({
                "method": method,
                "path": path,
                "counter": counter,
                "message": message.decode(),
                "proof": f"{counter}.{b64u(mac)}",
            })
        sessions.append({
            "session_id": session_id,
            "client": describe(client),
            "server": describe(server),
            "shared_secret_hex": shared.hex(),
            "aes_key_hex": key.hex(),
            "proof_key_hex": proof_key.hex(),
            "batches": batches,
            "proofs": proofs,
        })

    vectors = {
        "generated_by": "ingest/sdk/test/vectors.py (pyca/cryptography)",
        "hkdf_info": INFO.decode(),
        "proof_hkdf_info": PROOF_INFO.decode(),
        "sessions": sessions,
        "nonces": [{"seq": s, "hex": nonce(s).hex()} for s in [1, 2, 255, 256, 65536, 2**32 - 1, 2**32, 2**32 + 5, 2**53 - 1]],
        "base64url": [
            {"hex": h, "b64u": b64u(bytes.fromhex(h))}
            for h in ["", "00", "ff", "fbff", "fbffbf", "0001020304", "fefdfcfbfaf9f8f7", bytes(range(256)).hex()]
        ],
    }
    print(json.dumps(vectors, indent=2))


if __name__ == "__main__":
    main()
