# JWT login: a CONNECT's password (or user name) carries a signed token;
# its claims say who the client is, until when, and what it may touch.
#
# Theory of operation. The shell builds a JwtAuth from its config (keys,
# the wall clock, the checks) and sets broker.jwt; without one nothing here
# is loaded (a board that configures no JWT never holds this module).
# login.login() hands it a CONNECT that carries a token in the configured
# field (`token_in`: "password" or "username"); a CONNECT without one goes
# on to the password file and anonymous rules as before. login():
#   - decodes the token (common/crypto/jws.py: a reason for anything
#     malformed or over max_token_bytes), picks the keys for the header's
#     "alg" (and "kid" if the token names one; each key is bound to its
#     algorithms when loaded: "none" and a public key used as an HMAC
#     secret find none), verifies the signature, then exp/nbf (with
#     `leeway` s), iss and aud;
#   - takes the user from `user_claim` ("sub"); a CONNECT user name given
#     along a token in the password must be that user;
#   - checks the ACL claim's shape (below).
# A refusal is 3.1.1 CONNACK 0x04 / v5 0x86 with the reason in the log
# (and counted: login_failed, `refused`); the token is never logged.
#
# ACL from claims: `acl_claim` ("acl") is {"publish": [filters...],
# "subscribe": [filters...]} with %u and %c, added to the client's file ACL
# rules as granted.py says (a file deny rule still wins). A token without
# the claim gets the file ACL's rules only (or none: everything, without a
# file ACL).
#
# exp during the session: by_cid keeps each connection's expiry (exp +
# leeway) and `due`, the earliest; Broker.tick calls tick(), which closes
# a connection whose token expired: v5 DISCONNECT 0xA0 (Maximum connect
# time), 3.1.1 a close. The driver ticks at least once a second, and once
# the earliest expiry is less than a second away it sets the broker's
# connection deadline to it, so the close comes within milliseconds.

from common.broker.connection import CONNECTED
from common.compat import ticks_deadline
from common.crypto.jws import check_claims, decode
from common.mqtt import consts as C

MAXIMUM_CONNECT_TIME = 0xA0  # v5 DISCONNECT reason
SECRET_MIN_BYTES = 32  # RFC 7518 3.2: an HMAC key at least as long as HS256's hash


class Key:
    """A verification key: its `kid` (None: any), the algorithms it may
    verify (fixed by its type) and verify(alg, signing_input, signature)."""

    def __init__(self, kid, algorithms, verify):
        self.kid = kid
        self.algorithms = algorithms
        self.verify = verify


def narrowed(where, algs, narrow):
    """`algs` that `narrow` (None: all) keeps; ConfigError when none."""
    if narrow is None:
        return algs
    kept = [a for a in algs if a in narrow]
    if not kept:
        from common.broker.limits import ConfigError

        raise ConfigError("%s: this key verifies %s, none of algorithms %s." % (where, ", ".join(algs), narrow))
    return kept


def hmac_key(secret, where, narrow):
    """The Key of an HMAC `secret` (bytes) for the HS algorithms this port's
    hashlib computes (narrowed); ConfigError naming `where` for a PEM key
    or a secret too short. Both shells load secrets with it."""
    from common.broker.limits import ConfigError
    from common.crypto.jws import hmac_algorithms, hmac_verifier

    if b"-----BEGIN" in secret:
        raise ConfigError("%s: a PEM key is not an HMAC secret (use public_key_file for it)." % where)
    if len(secret) < SECRET_MIN_BYTES:
        raise ConfigError("%s: an HMAC secret of %d bytes; at least %d wanted." % (where, len(secret), SECRET_MIN_BYTES))
    algs = narrowed(where, hmac_algorithms(), narrow)
    return Key(None, algs, hmac_verifier(secret, algs))


# The checks' settings and their defaults (the host's [security.jwt] keys).
OPTIONS = {
    "token_in": "password",  # the CONNECT field that carries the token ("password", "username")
    "issuer": None,  # the iss a token must name; None: not checked
    "audience": None,  # a value its aud must hold; None: not checked
    "leeway": 0,  # s of clock skew allowed on exp and nbf
    "require_exp": True,  # refuse tokens without exp
    "user_claim": "sub",  # the claim naming the user
    "acl_claim": "acl",  # the claim of ACL rules
    "max_token_bytes": 4096,  # longer tokens are refused before parsing
}


class JwtAuth:
    RULES_FROM = "the token's"  # (the log's name for its ACL claim: granted.py)

    def __init__(self, keys, wall, options=None):
        """`keys`: [Key]; `wall`: () -> seconds since 1970 (the shell's
        clock); `options`: OPTIONS's keys (those left out: the default)."""
        o = {}
        for name in OPTIONS:
            o[name] = options[name] if options is not None and options.get(name) is not None else OPTIONS[name]
        self.keys = keys
        self.wall = wall
        self.token_in = o["token_in"]
        self.issuer = o["issuer"]
        self.audience = o["audience"]
        self.leeway = o["leeway"]
        self.require_exp = o["require_exp"]
        self.user_claim = o["user_claim"]
        self.acl_claim = o["acl_claim"]
        self.max_token_bytes = o["max_token_bytes"]
        # cid -> (its Connection's Extras, expiry or None, (publish, subscribe)
        # or None): the Extras tell the entry of this connection from that of
        # an earlier one with the same id (a reused Connection gets new ones).
        self.by_cid = {}
        self.due = 0  # the earliest expiry in by_cid (wall s), 0 = none
        self.refused = 0  # CONNECTs refused for their token (also in stats.login_failed)
        # The shell's, or None: refresh() at each tick (the host's JWKS
        # refresh: cpython_host/auth/jwks.py), missing(kid) when no key has a
        # token's kid (a rotated key: fetch the set again).
        self.refresh = None
        self.missing = None

    def token_of(self, pkt):
        """The CONNECT's token, or None (then the password file decides)."""
        return pkt.password if self.token_in == "password" else pkt.username

    def verify(self, token):
        """The claims of a valid `token`, or the reason it is not."""
        parts = decode(token, self.max_token_bytes)
        if isinstance(parts, str):
            return parts
        header, claims, signing_input, signature = parts
        alg = header["alg"]
        kid = header.get("kid")
        tried = False
        for key in self.keys:
            if alg in key.algorithms and (kid is None or key.kid is None or key.kid == kid):
                tried = True
                if key.verify(alg, signing_input, signature):
                    why = check_claims(claims, self.wall(), self.leeway, self.issuer, self.audience, self.require_exp)
                    return claims if why is None else why
        if not tried and kid is not None and self.missing is not None:
            self.missing(kid)
        return "bad signature" if tried else "no key for alg %s" % alg + ("" if kid is None else " and kid %s" % kid)

    def login(self, broker, peer, pkt, found):
        """Judge the CONNECT's token: 0 (found.user, .granted, .expiry set:
        the CONNECT's handle_connect.Found) or (reason, why)."""
        claims = self.verify(self.token_of(pkt))
        user = None
        rules = None
        if isinstance(claims, str):
            why = claims
        else:
            user = claims.get(self.user_claim)
            rules = None
            if self.acl_claim in claims:
                from common.broker.granted import shape

                rules = shape(claims.get(self.acl_claim))
            if not isinstance(user, str) or not user:
                why = "no %s claim (a string) for the user" % self.user_claim
            elif self.token_in == "password" and pkt.username is not None and pkt.username != user:
                why = "user name %s is not the token's %s" % (pkt.username, user)
            elif isinstance(rules, str):
                why = rules
            else:
                why = None
        if why is not None:
            self.refused += 1
            broker.stats.login_failed += 1
            return C.RC_BAD_USER_NAME_OR_PASSWORD, (
                "bad token: %s (client id %s, from %s)",
                (why, pkt.client_id, peer[0] if peer is not None else "-"),
            )
        exp = claims.get("exp")
        found.user = user
        found.granted = rules
        found.expiry = exp + self.leeway if exp is not None else None
        found.source = self
        return 0

    def attach(self, conn, found):
        """The accepted connection keeps its token's expiry and rules (or
        loses an earlier connection's, its id reused)."""
        if found.source is not self:
            self.by_cid.pop(conn.cid, None)
            return
        expiry = found.expiry
        if expiry is not None and (not self.due or expiry < self.due):
            self.due = expiry
        self.by_cid[conn.cid] = (conn.extra(), expiry, found.granted)

    def granted(self, conn):
        """The rules of the connection's token (a granted.shape()), or None."""
        entry = self.by_cid.get(conn.cid)
        return entry[2] if entry is not None and entry[0] is conn.extras else None


    def tick(self, broker, now, ms):
        """Close the connections whose token expired (Broker.tick)."""
        if self.refresh is not None:
            self.refresh()
        due = self.due
        if not due:
            return
        wall = self.wall()
        if wall < due:
            left = due - wall
            if left < 1:
                broker._due(ticks_deadline(ms, int(left * 1000) + 1))
            return
        expired = []
        due = 0
        connections = broker.connections.by_id
        for cid in self.by_cid:
            tag, expiry, _rules = self.by_cid[cid]
            if expiry is None:
                continue
            conn = connections[cid]
            if conn.extras is not tag or conn.state != CONNECTED or expiry <= wall:
                expired.append(cid)
            elif not due or expiry < due:
                due = expiry
        self.due = due
        for cid in expired:
            tag, expiry, _rules = self.by_cid.pop(cid)
            conn = connections[cid]
            if conn.extras is tag and conn.state == CONNECTED:
                broker.stats.closed_token_expired += 1
                name = broker.client_name(conn)
                sent = broker.fail(conn, MAXIMUM_CONNECT_TIME, now, text="token expired")
                broker.log(
                    30, "closing %s (user %s): its token expired at %d; sent %s", (name, conn.user, expiry, sent)
                )
