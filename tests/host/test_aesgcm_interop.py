"""The two AES-GCM implementations of the encrypted store agree (CPython only).

- Property (hypothesis): for random keys (AES-128/192/256), nonces, plaintext
  and AAD lengths, common.crypto.aesgcm.AesGcm over an ECB block function from
  `cryptography` and cpython_host.runtime.crypto (cryptography's AESGCM) produce the
  same bytes, each opens the other's output, and both refuse a flipped byte.
- Across interpreters: a record sealed by cpython_host.runtime.crypto opens under
  the venv's MicroPython through firmware/crypto.py (cryptolib's AES-ECB and
  our CTR and GHASH), and a record sealed there opens here.

SISKIN_FUZZ_EXAMPLES raises the example count (`make fuzz`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.crypto.aesgcm import AesGcm, AuthError
from cpython_host.runtime.crypto import make_aead
from tests.core.ecb_helper import make_ecb
from tests.host.test_micropython import run_micropython

EXAMPLES = max(60, int(os.environ.get("SISKIN_FUZZ_EXAMPLES", "0")))


def pure_aead(key: bytes) -> AesGcm:
    return AesGcm(key, make_ecb(key))


@settings(max_examples=EXAMPLES)
@given(
    key=st.sampled_from((16, 24, 32)).flatmap(lambda n: st.binary(min_size=n, max_size=n)),
    nonce=st.binary(min_size=12, max_size=12),
    plaintext=st.binary(max_size=200),
    aad=st.binary(max_size=70),
    flip=st.integers(min_value=0),
)
def test_pure_and_cryptography_agree(key: bytes, nonce: bytes, plaintext: bytes, aad: bytes, flip: int) -> None:
    pure, host = pure_aead(key), make_aead(key)
    sealed = pure.encrypt(nonce, plaintext, aad)
    assert sealed == host.encrypt(nonce, plaintext, aad)
    assert host.decrypt(nonce, sealed, aad) == plaintext
    assert pure.decrypt(nonce, sealed, aad) == plaintext
    damaged = bytearray(sealed)
    damaged[flip % len(damaged)] ^= 1 << (flip % 8)
    for aead in (pure, host):
        with pytest.raises(AuthError):
            aead.decrypt(nonce, bytes(damaged), aad)


def test_host_rejects_other_nonce_lengths() -> None:
    host = make_aead(bytes(16))
    for size in (8, 11, 13, 16):
        with pytest.raises(ValueError):
            host.encrypt(bytes(size), b"x", b"")
        with pytest.raises(ValueError):
            host.decrypt(bytes(size), bytes(17), b"")


# What the MicroPython side runs. The input is a file of lines
# seal|open, key, nonce, aad, data (hex): argv strings of a few hundred bytes
# crash the unix port 1.29 ("FATAL: uncaught NLR"). Prints "result " and the
# output in hex, or AuthError.
UPY_SCRIPT = """\
import sys
from common.crypto.aesgcm import AuthError
from firmware.crypto import make_aead

with open(sys.argv[1]) as f:
    mode, key, nonce, aad, data = f.read().split("\\n")[:5]
key, nonce, aad, data = [bytes.fromhex(a) for a in (key, nonce, aad, data)]
aead = make_aead(key)
try:
    out = aead.encrypt(nonce, data, aad) if mode == "seal" else aead.decrypt(nonce, data, aad)
    print("result", out.hex())
except AuthError:
    print("result AuthError")
"""

RECORD_KEY = bytes(range(32))
RECORD_NONCE = bytes.fromhex("00000007" + "0000000000000029")  # boot counter, record counter
RECORD_AAD = b"\x01\x01\x01" + b"s/" + b"client-42"
RECORD = b"session state: " + bytes(range(256)) * 3


def upy_aead(tmp_path: Path, encrypt: bool, data: bytes, aad: bytes = RECORD_AAD) -> str:
    script = tmp_path / "aead_cli.py"
    script.write_text(UPY_SCRIPT)
    job = tmp_path / "job.txt"
    fields = ["seal" if encrypt else "open", RECORD_KEY.hex(), RECORD_NONCE.hex(), aad.hex(), data.hex()]
    job.write_text("\n".join(fields) + "\n")
    proc = run_micropython(str(script), str(job), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.split("result ", 1)[1].strip()


def test_host_record_opens_under_micropython(tmp_path: Path) -> None:
    sealed = make_aead(RECORD_KEY).encrypt(RECORD_NONCE, RECORD, RECORD_AAD)
    assert upy_aead(tmp_path, False, sealed) == RECORD.hex()
    assert upy_aead(tmp_path, False, sealed, aad=RECORD_AAD + b"x") == "AuthError"


def test_micropython_record_opens_on_host(tmp_path: Path) -> None:
    sealed = bytes.fromhex(upy_aead(tmp_path, True, RECORD))
    assert make_aead(RECORD_KEY).decrypt(RECORD_NONCE, sealed, RECORD_AAD) == RECORD
    with pytest.raises(AuthError):
        make_aead(RECORD_KEY).decrypt(RECORD_NONCE, sealed[:-1] + bytes([sealed[-1] ^ 1]), RECORD_AAD)
