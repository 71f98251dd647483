# The password file: who may log in with a user name and password.
#
# Theory of operation. A password file is text, one user per line:
#
#     alice:$pbkdf2-sha256$10000$<salt, base64>$<hash, base64>   Siskin's own
#     bob:$pbkdf2-sha512$10000$<salt>$<hash>                      Siskin's own
#     carol:$7$101$<salt>$<hash>                  mosquitto_passwd (PBKDF2-SHA512)
#     # a comment; blank lines are skipped
#
# The hash is PBKDF2-HMAC (common/crypto/pbkdf2.py) of the password's bytes
# with that salt and iteration count; the password itself is never kept. A
# line Siskin cannot use stops the loading with "FILE:LINE: reason" (a
# plain-text password, mosquitto's old one-round "$6$" SHA-512, an unknown
# scheme, a user twice, SHA-512 on a port without it: MicroPython's hashlib
# has only SHA-256), so a typo never silently locks a user out or lets one in.
#
# check(user, password) does the same work whatever the answer and whatever
# line it meets, so neither the answer nor the time tells a client whether
# a user exists, nor which kind of line is his. A file may mix costs (its
# own 10,000 rounds of SHA-256 and a mosquitto_passwd line of 101 rounds of
# SHA-512): its `plan` holds, for each hash of the file, the most rounds
# (iterations x blocks of the key) any of its lines costs, and every check
# runs, for each hash in turn, two PBKDF2 calls that add up to that many
# rounds plus one: the user's own line and the rest as padding, or (an
# unknown user, another hash) the whole cost against a stand-in salt and
# one more round. The hashes are compared in constant time.

from common.broker.settings import ConfigError, content_lines
from common.crypto.pbkdf2 import HASHES, has_hash, pbkdf2_hmac, same_bytes

# scheme word -> hash name
SCHEMES = {"pbkdf2-sha256": "sha256", "pbkdf2-sha512": "sha512", "7": "sha512"}
# What `siskin passwd` writes: SHA-256 works on every port (boards included).
DEFAULT_SCHEME = "pbkdf2-sha256"
DEFAULT_ITERATIONS = 10000
MAX_ITERATIONS = 10000000


def _b64(text):
    import binascii  # (start-up only)

    return binascii.a2b_base64(text.encode())


def parse_hash(text):
    """(hash name, iterations, salt, hash) of a "$scheme$..." field, or a
    reason string why it cannot be used."""
    if not text.startswith("$"):
        return "not a hashed password (plain text is refused: hash it with `siskin passwd` or mosquitto_passwd)"
    parts = text.split("$")
    scheme = parts[1]
    if scheme == "6":
        return "mosquitto's old \"$6$\" hash (one round of SHA-512) is too weak to accept: set the password again with `siskin passwd` or mosquitto_passwd 2.x"
    name = SCHEMES.get(scheme)
    if name is None:
        return "unknown hash scheme $%s$ (known: $pbkdf2-sha256$, $pbkdf2-sha512$, mosquitto's $7$)" % scheme
    if len(parts) != 5:
        return "a $%s$ hash has the fields $%s$ITERATIONS$SALT$HASH" % (scheme, scheme)
    if not has_hash(name):
        return "this port's hashlib has no %s (MicroPython offers SHA-256 only): use $pbkdf2-sha256$ lines" % name
    try:
        iterations = int(parts[2])
        salt = _b64(parts[3])
        digest = _b64(parts[4])
    except ValueError:
        return "bad iteration count or base64 in the hash"
    if not 1 <= iterations <= MAX_ITERATIONS:
        return "iterations %d outside 1..%d" % (iterations, MAX_ITERATIONS)
    if not salt or len(digest) < 16:
        return "empty salt or a hash shorter than 16 bytes"
    return name, iterations, salt, digest


def format_hash(iterations, salt, digest, scheme=DEFAULT_SCHEME):
    """The "$scheme$..." field for a line (siskin passwd, tests)."""
    import binascii

    def b64(b):
        return binascii.b2a_base64(b).strip().decode()

    return "$%s$%d$%s$%s" % (scheme, iterations, b64(salt), b64(digest))


def rounds(entry):
    """PBKDF2 rounds one check of `entry` (hash name, iterations, salt,
    hash) costs: iterations for each block of its key."""
    size = HASHES[entry[0]][1]
    return entry[1] * ((len(entry[3]) + size - 1) // size)


class Users:
    """The users of a password file: parse(text, where), then check()."""

    def __init__(self):
        self.by_name = {}  # user -> (hash name, iterations, salt, hash)
        self.plan = []  # (hash name, rounds, stand-in salt), sorted: every check's work
        self.kdf = pbkdf2_hmac  # (the tests count the rounds through it)

    def __len__(self):
        return len(self.by_name)

    @staticmethod
    def parse(text, where):
        """The Users of a password file's `text`; ConfigError "WHERE:LINE: reason"."""
        users = Users()
        seen = {}
        for number, line in content_lines(text):
            colon = line.find(":")
            if colon <= 0:
                raise ConfigError("%s:%d: wants USER:HASH (no ':' found, or no user name)" % (where, number))
            name = line[:colon]
            entry = parse_hash(line[colon + 1 :])
            if isinstance(entry, str):
                raise ConfigError("%s:%d: user %r: %s" % (where, number, name, entry))
            if name in seen:
                raise ConfigError("%s:%d: user %r is already on line %d" % (where, number, name, seen[name]))
            seen[name] = number
            users.by_name[name] = entry
        most = {}  # hash name -> the costliest entry of it
        for entry in users.by_name.values():
            top = most.get(entry[0])
            if top is None or rounds(entry) > rounds(top):
                most[entry[0]] = entry
        users.plan = sorted([(h, rounds(e), e[2]) for h, e in most.items()])
        return users

    def check(self, name, password):
        """True when `password` (bytes) is `name`'s; the same work whatever
        the answer and whatever line it meets (the plan)."""
        entry = self.by_name.get(name) if name is not None else None
        password = password or b""
        kdf = self.kdf
        ok = False
        for hash_name, most, salt in self.plan:
            if entry is not None and entry[0] == hash_name:
                ok = same_bytes(kdf(hash_name, password, entry[2], entry[1], len(entry[3])), entry[3])
                pad = most - rounds(entry) + 1
            else:
                kdf(hash_name, password, salt, most, 0)
                pad = 1
            kdf(hash_name, password, salt, pad, 0)
        return ok
