"""The sealed envelope of a keyed MQTT-SN listener (docs/mqtt-sn.md,
Security): per-client credentials for MQTT-SN v1.2, which has none, without
DTLS. Loaded only when the listener's settings have `keys`.

Theory of operation
-------------------
Each client holds a pre-shared key (16 or 32 bytes) named by its client id,
the key id. Two direction keys are derived from it by HKDF-SHA256, so the
nonces of the two directions never meet under one key. Every datagram both
ways is one v1.2 message sealed with AES-GCM (the shell's `make_aead`). The
first octet 0x00 is an invalid v1.2 Length (§5.2.1): an envelope cannot be
mistaken for a message.

    client -> gateway  00 01 | kid_len | kid | C (8) | ctr (4, big endian) | AES-GCM | tag (16)
    challenge          00 02 | kid_len | kid | C' (8)                 (plain)
    gateway -> client  00 03 | C (8) | ctr (4) | AES-GCM | tag (16)

The nonce is C | ctr, the AAD every header octet before the ciphertext.

Freshness without persisting anything: C is a challenge the gateway drew
from the shell's entropy. Per key it keeps the `current` one (with the
highest ctr seen and a 64-datagram window of the ones below it: UDP
reorders, a replay inside the window is refused, an older one too) and a
`pending` one. A datagram under neither (a client that just booted sends its
header alone with C = 8 zero octets; one from before a gateway restart) is
answered with a fresh challenge, which becomes `pending`; the first datagram
that authenticates under it promotes it to `current` (window reset). So
unauthenticated challenge requests can churn the pending challenge, never a
working client's current one, and what was recorded under an earlier
challenge (an earlier gateway run included) never opens again. The gateway
seals its own datagrams under the client's current C with its own counter,
from 1 at each promotion. Nothing is opened under a C the gateway did not
issue, so a client never needs to seal before it has one.
"""

from common.crypto.aesgcm import TAG_SIZE
from common.crypto.hkdf import hkdf_sha256

SEALED = 1  # client -> gateway
CHALLENGE = 2  # gateway -> client, plain
SEALED_DOWN = 3  # gateway -> client

SALT = b"siskin-sn-envelope-v1"
UP_INFO = b"client->gateway"
DOWN_INFO = b"gateway->client"

WINDOW = 64  # datagrams below the highest counter still accepted once each
WINDOW_MASK = (1 << WINDOW) - 1
CTR_MAX = 0xFFFFFFFF  # a 4-octet counter: the client takes a new challenge before it wraps
NO_CHALLENGE = bytes(8)  # never issued: a booting client's C
DOWN_OVERHEAD = 14 + TAG_SIZE  # 00 03 C ctr + tag


def up_overhead(kid_len):
    """Octets an envelope from a client adds to the SN message (the tag included)."""
    return 3 + kid_len + 12 + TAG_SIZE


def derive_keys(key):
    """The (client->gateway, gateway->client) keys of a client's key."""
    n = len(key)
    return hkdf_sha256(key, SALT, UP_INFO, n), hkdf_sha256(key, SALT, DOWN_INFO, n)


class KeyState:
    """One configured key: its AEADs and its challenges."""

    def __init__(self, name, make_aead, key):
        self.name = name  # the client id it belongs to
        self.kid = name.encode()
        up, down = derive_keys(key)
        self.up = make_aead(up)
        self.down = make_aead(down)
        self.current = None  # the challenge datagrams open under (None: none yet)
        self.top = 0  # the highest counter seen under current
        self.seen = 0  # bit i: counter top - i was seen
        self.pending = None  # the challenge last issued, promoted by its first authentic datagram
        self.sent = 0  # the gateway's counter under current
        self.addr = None  # where its last authentic datagram came from


class Envelope:
    """Every key of one listener: opens what comes in, seals what goes out."""

    def __init__(self, keys, make_aead, entropy):
        """`keys`: {client id: key bytes}; `make_aead(key)`: the shell's
        AES-GCM; `entropy(n)`: n random bytes (the shell's)."""
        self.entropy = entropy
        self.by_kid = {}
        for name in keys:
            st = KeyState(name, make_aead, keys[name])
            self.by_kid[st.kid] = st
        self.by_addr = {}  # address -> the KeyState its last authentic datagram was under
        self.out = []  # (address, datagram) sent as they are: challenges, GWINFO to a plain SEARCHGW

    def open(self, addr, data):
        """(KeyState, the SN message, None) of an authentic datagram, else
        (None, None, (counter, why)): the refusal's Stats counter and reason."""
        n = len(data)
        if n < 4 or data[1] != SEALED:
            return None, None, ("sn_bad_seal", "not a client's envelope")
        klen = data[2]
        h = 3 + klen + 12  # the header's end: kid, C, ctr
        if klen == 0 or n < h:
            return None, None, ("sn_bad_seal", "envelope header truncated")
        st = self.by_kid.get(bytes(data[3 : 3 + klen]))
        if st is None:
            return None, None, ("sn_bad_seal", "no key for this key id")
        c = bytes(data[h - 12 : h - 4])
        if c != st.current and c != st.pending:
            self._challenge(addr, st)
            return None, None, ("sn_challenged", "not under a challenge this gateway holds: challenged")
        if n < h + TAG_SIZE:
            return None, None, ("sn_bad_seal", "no room for the tag")
        ctr = int.from_bytes(data[h - 4 : h], "big")
        if c == st.current and not self._fresh(st, ctr):
            return None, None, ("sn_replayed", "counter replayed or older than the window")
        try:
            plain = st.up.decrypt(bytes(data[h - 12 : h]), bytes(data[h:]), bytes(data[:h]))
        except ValueError:  # AuthError: wrong key, tampered
            return None, None, ("sn_bad_seal", "tag does not match (wrong key or tampered)")
        if c == st.current:
            self._mark(st, ctr)
        else:  # the pending challenge: its first authentic datagram makes it current
            st.current = c
            st.pending = None
            st.top = ctr
            st.seen = 1
            st.sent = 0
        return st, plain, None

    def bind(self, addr, st):
        """What goes to `addr` is sealed under `st` (its last authentic datagram was)."""
        if st.addr != addr:
            if st.addr is not None and self.by_addr.get(st.addr) is st:
                del self.by_addr[st.addr]
            st.addr = addr
        self.by_addr[addr] = st

    def seal(self, st, data):
        """The envelope of one SN message to `st`'s client; None once its counter is spent."""
        if st.sent >= CTR_MAX:
            return None  # (after 2^32 - 1 datagrams: the client must take a new challenge)
        st.sent += 1
        header = b"\x00\x03" + st.current + st.sent.to_bytes(4, "big")
        return header + st.down.encrypt(header[2:], bytes(data), header)

    def seal_all(self, out):
        """`out`'s (address, SN message) pairs sealed for their addresses'
        keys, after the plain ones; a message to an address no key has
        authenticated from is dropped (never sent in clear)."""
        sealed = self.out
        self.out = []
        for addr, data in out:
            st = self.by_addr.get(addr)
            if st is not None:
                env = self.seal(st, data)
                if env is not None:
                    sealed.append((addr, env))
        return sealed

    def _challenge(self, addr, st):
        c = self.entropy(8)
        while c == NO_CHALLENGE:
            c = self.entropy(8)
        st.pending = c
        self.out.append((addr, b"\x00\x02" + bytes((len(st.kid),)) + st.kid + c))

    def _fresh(self, st, ctr):
        if ctr > st.top:
            return True
        d = st.top - ctr
        return d < WINDOW and not (st.seen >> d) & 1

    def _mark(self, st, ctr):
        if ctr > st.top:
            shift = ctr - st.top
            st.seen = ((st.seen << shift) | 1) & WINDOW_MASK if shift < WINDOW else 1
            st.top = ctr
        else:
            st.seen |= 1 << (st.top - ctr)
