# Opening the store, for both shells: the key text, the opener, and the
# broker wired to it.
#
# A shell picks the backend (the host's POSIX log file, a board's littlefs
# file or raw flash partition) and the AEAD maker (the `cryptography`
# package, a board's cryptolib) and reads the key text; what the text means
# and how the store is opened are decided here, once.
#
# Key text: one key as 64 hex digits (AES-256) or 32 (AES-128), which gets
# key id 1; or, to rotate keys, lines `ID:HEX` (ID 1..255) of which the
# highest id encrypts new records and the others still read old ones. Lines
# starting with # are comments.

from common.broker.broker import Broker
from common.compat import from_hex
from common.store.persist import Persist
from common.store.store import Store, StoreError


def parse_keys(text):
    """Key id -> key bytes from key text; StoreError naming what is wrong."""
    lines = []
    for line in text.split("\n"):
        line = line.strip()
        if line and not line.startswith("#"):
            lines.append(line)
    if not lines:
        raise StoreError("the store key is empty: give 64 hex digits")
    keys = {}
    for line in lines:
        kid = 1
        sep = line.find(":")
        hex_text = line
        if sep >= 0:
            kid_text = line[:sep]
            hex_text = line[sep + 1 :]
            if not kid_text.isdigit() or not 1 <= int(kid_text) <= 255:
                raise StoreError("store key line %s...: the key id before ':' must be 1..255" % line[:8])
            kid = int(kid_text)
        elif len(lines) > 1:
            raise StoreError("several store keys need ids: write each line as ID:HEX")
        key = None
        try:
            key = from_hex(hex_text)
        except ValueError:
            pass
        if key is None:
            raise StoreError("store key %d: not hex digits" % kid)
        if len(key) != 16 and len(key) != 32:
            raise StoreError("store key %d: %d bytes; AES needs 16 or 32 (32 or 64 hex digits)" % (kid, len(key)))
        if kid in keys:
            raise StoreError("store key id %d given twice" % kid)
        keys[kid] = key
    return keys


def open_store(backend, keys=None, make_aead=None, log=None, wipe=False):
    """The opened Store over `backend`; StoreError with advice if it cannot be used.

    `keys`: key id -> AES key (parse_keys, or keys derived from it), sealed
    with make_aead(key); None or empty: a plain store. The newest id
    encrypts. `wipe` discards what the store holds. The backend is closed if
    opening fails.
    """
    aeads = {}
    key_id = 0
    if keys:
        for kid in keys:
            aeads[kid] = make_aead(keys[kid])
            if kid > key_id:
                key_id = kid
    store = Store(backend, aeads, key_id, log)
    try:
        store.open(wipe)
    except BaseException:
        backend.close()
        raise
    return store


def new_broker(settings, entropy, store=None):
    """The broker; with a `store`, its persistence listener writes to it
    (then call Driver.restore before serving)."""
    return Broker(settings, entropy, Persist(store) if store is not None else None)
