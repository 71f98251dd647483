# The store's key text, for both shells: what a key file (a board's
# storage_key_file, the host's --store-key-file or SISKIN_STORE_KEY) means.
#
# Key text: one key as 64 hex digits (AES-256) or 32 (AES-128), which gets
# key id 1; or, to rotate keys, lines `ID:HEX` (ID 1..255) of which the
# highest id encrypts new records and the others still read old ones. Lines
# starting with # are comments.
#
# A module of its own: a board imports it only when a key file exists
# (firmware/storage.py), so one without keeps it out of its heap.

from common.compat import from_hex
from common.store.store import StoreError


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
