# Who a connecting client is, whether it may connect at all, and the rules
# it gets: the broker's side of users (users.py), anonymous access and the
# ACL (acl.py).
#
# Theory of operation. handle_connect calls login() once a CONNECT passed
# its protocol checks. The client's user is, in this order: the user a v5
# SCRAM exchange proved (conn.user, set by enhanced_auth), the identity of
# its TLS client certificate (the shell's peer[1], for a listener with
# use_identity_as_username), a signed token's user (broker.jwt, set by the
# shell: jwt_auth.py), the CONNECT's user name as a service outside says
# (broker.hook: external_auth.py), or its user name checked against the
# password file. A wrong password and an unknown user get the same answer
# (3.1.1 CONNACK 0x04, v5 0x86) after the same work (Users.check). Without
# a password file a user name cannot be checked, so it is not believed: the
# client is anonymous.
#
# Anonymous clients are allowed when allow_anonymous is true, or when it is
# not set, no password file is configured and the connection came in on a
# loopback-only listener (the shell's peer[2]; no peer counts as local):
# like Mosquitto 2, a broker nobody configured serves only its own host.
# Else: 3.1.1 CONNACK 0x05, v5 0x87, and the log says why and what to set.
#
# Brute force (secured.py): each source address (the peer's address
# without its port) and user name that fails a login is held back for 1, 2,
# 4 ... up to PENALTY_MAX_S seconds (from 1 s again after PENALTY_MAX_S
# quiet seconds); a login of that name from that address during its hold
# is refused with the same answer as a wrong password WITHOUT checking the
# password, so no more than one password per hold is ever tried for one
# name from one address, however fast it reconnects. Other names from the
# same address are not held back by it: one device with a stale password
# behind a NAT (or on a gateway's loopback) does not lock out its
# neighbours. Besides, an address has a budget of checked failures a minute
# (login_failures_per_address, any names): spent, its logins wait
# unchecked for the minute to end, unless it is in login_budget_exempt
# (loopback by default). A success ends its name's hold, not the budget.
# Each table holds at most PENALTY_ENTRIES keys (the oldest makes room), so
# a flood costs bounded memory; it cannot slow an attacker who has many
# addresses (docs/security.md).
#
# Session ownership: a session belongs to the user whose client made it
# (anonymous clients are one owner, None). A CONNECT whose client id names a
# session, live or kept, of another owner is refused (3.1.1 CONNACK 0x05,
# v5 0x87): taking it over would disconnect its client and hand its
# subscriptions and queued messages to someone else. Without users every
# client is anonymous, so takeover works as the spec describes [MQTT-3.1.4-2].
#
# security_files.set_security() installs new users and rules (start, SIGHUP
# on the host; start-up only on a board):
# every connected client gets its rules again and loses the subscriptions
# they no longer allow; a held will (of a live client, or waiting out its
# v5 delay) its owner may no longer publish is discarded, counted as a
# refused PUBLISH (a will is judged again when it is sent). An offline
# session is re-checked when its user resumes it (only its owner may:
# refusal.owner_refusal), and what it had queued or in flight is sent only where
# the new rules let its client read.
# Connected clients keep their login until they reconnect.
#
# What only a broker with a password file or an ACL runs (the password check
# and its penalty, the re-checks against new rules) is secured.py, loaded
# by set_security with them: a board without users or ACL never loads it.

from common.compat import const

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_RC_NOT_AUTHORIZED = const(0x87)


def listener_key(peer):
    """The shell's key of the listener `peer` came in on (its 4th item), or None."""
    return peer[3] if peer is not None and len(peer) > 3 else None


def security_of(broker, key):
    """Whose users, ACL and anonymous switch rule listener `key`'s clients:
    its own (listener_policy.ListenerPolicy with `own`), else the broker's."""
    policy = broker.listener_policies.get(key) if key is not None else None
    return policy if policy is not None and policy.own else broker


def anonymous_allowed(broker, peer):
    """Whether a client without a user may connect through `peer`'s listener."""
    sec = security_of(broker, listener_key(peer))
    allow = sec.allow_anonymous
    if allow is not None:
        return allow
    return sec.users is None and (peer is None or peer[2])


def source_address(peer):
    """The peer's address without its port ("" without a peer)."""
    if peer is None:
        return ""
    text = peer[0]
    colon = text.rfind(":")
    return text[:colon] if colon > 0 else text


def login(broker, peer, pkt, found, now):
    """Decide who the client of `pkt` (a CONNECT through `peer`) is; 0 or
    (reason, why). Sets found.user (None: anonymous; handle_connect.Found,
    which holds the user a SCRAM exchange proved)."""
    identity = peer[1] if peer is not None else None
    users = security_of(broker, listener_key(peer)).users
    if found.user is not None:
        pass  # proved by enhanced authentication (SCRAM)
    elif identity is not None:
        found.user = identity  # proved by the TLS client certificate
    elif broker.jwt is not None and broker.jwt.token_of(pkt) is not None:
        return broker.jwt.login(broker, peer, pkt, found)  # a signed token (jwt_auth.py)
    elif broker.hook is not None and pkt.username is not None:
        return broker.hook.login(broker, peer, pkt, found)  # asked outside (external_auth.py)
    elif users is not None and (pkt.username is not None or pkt.password is not None):
        from common.broker.secured import password_login  # (loaded with the users)

        refused = password_login(broker, peer, source_address(peer), pkt, now, users)
        if refused:
            return refused
        found.user = pkt.username
    if found.user is None and not anonymous_allowed(broker, peer):
        from common.broker.refusal import anonymous_refused  # (the words of a refusal: refusal.py)

        return _RC_NOT_AUTHORIZED, anonymous_refused(security_of(broker, listener_key(peer)))
    return 0


def client_rules(broker, user, peer, client_id, brought=None):
    """The ACL rules of a client (None without an ACL and nothing brought):
    its user's and client id's; a bridge's own local connection (`peer`
    with the address "bridge NAME" its runner registered in
    broker.bridge_grants, with a callable that gives its grants: no socket
    has such an address) is also let read its "out" filters and write its
    "in" topics, so an ACL written for devices cannot silently stop a
    bridge; a deny rule for user bridge:NAME still wins (docs/bridge.md).
    `brought`: (rules, source) a login brought (a JWT's claim, an auth
    hook's answer: granted.py), put after the file's rules."""
    acl = security_of(broker, listener_key(peer)).acl
    rules = None
    if acl is not None:
        from common.broker.secured import acl_rules  # (loaded with the ACL)

        rules = acl_rules(broker, acl, user, peer, client_id)
    if brought is not None:
        from common.broker import granted

        rules = granted.add(broker, rules, user, client_id, brought[0], brought[1])
    return rules


def brought_by(broker, conn):
    """(rules, source) the connection's login brought (a JWT's claim, an
    auth hook's answer), or None."""
    for extra in (broker.jwt, broker.hook):
        if extra is not None:
            rules = extra.granted(conn)
            if rules is not None:
                return rules, extra.RULES_FROM
    return None


def rules_for(broker, user, peer, client_id, brought=None):
    """A CONNECT's rules (client_rules), the log line said when a pattern left it none."""
    rules = client_rules(broker, user, peer, client_id, brought)
    if rules is not None and rules.refused is not None:
        from common.broker.secured import no_rules_said  # (an ACL, or rules a login brought: rare)

        no_rules_said(broker, user, client_id)
    return rules
