# The AES-ECB block function the AES-GCM tests hand to AesGcm, on whichever
# interpreter runs them: cryptolib on MicroPython, `cryptography` on CPython.
# The WebAssembly port has neither (see tools/wasm_run.mjs): there make_ecb
# returns None and the tests that need AES skip with NO_AES.

NO_AES = "this port has no AES block cipher (no cryptolib, no cryptography)"

try:
    import cryptolib
except ImportError:
    cryptolib = None


def make_ecb(key):
    """encrypt(block16) -> bytes for `key`, or None when no AES is available."""
    if cryptolib is not None:
        return cryptolib.aes(key, 1).encrypt  # mode 1: ECB
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError:
        return None
    return Cipher(algorithms.AES(key), modes.ECB()).encryptor().update
