# Who a connecting client is, whether it may connect at all, and the rules
# it gets: the broker's side of users (users.py), anonymous access and the
# ACL (acl.py).
#
# Theory of operation. handle_connect calls login() once a CONNECT passed
# its protocol checks. The client's user is, in this order: the user a v5
# SCRAM exchange proved (conn.user, set by handle_connect), the identity of
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
# Brute force: each source address (the peer's address without its port)
# that fails a login is penalised for 1, 2, 4 ... up to PENALTY_MAX_S
# seconds (from 1 s again after PENALTY_MAX_S quiet seconds); a login from
# it during its penalty is refused with the same answer as a wrong password
# WITHOUT checking the password, so no more than one password per penalty
# is ever tried from one address, however fast it reconnects. A success from the address ends its penalty. The table holds
# at most PENALTY_ADDRESSES addresses (the one whose penalty ends first
# makes room), so a flood of addresses costs bounded memory; it cannot slow
# an attacker who has many addresses (docs/security.md).
#
# Session ownership: a session belongs to the user whose client made it
# (anonymous clients are one owner, None). A CONNECT whose client id names a
# session, live or kept, of another owner is refused (3.1.1 CONNACK 0x05,
# v5 0x87): taking it over would disconnect its client and hand its
# subscriptions and queued messages to someone else. Without users every
# client is anonymous, so takeover works as the spec describes [MQTT-3.1.4-2].
#
# set_security() installs new users and rules (start, SIGHUP on the host):
# every connected client gets its rules again and loses the subscriptions
# they no longer allow; a held will (of a live client, or waiting out its
# v5 delay) its owner may no longer publish is discarded, counted as a
# refused PUBLISH (a will is judged again when it is sent). An offline
# session is re-checked when its user resumes it (only its owner may:
# owner_refusal), and what it had queued or in flight is sent only where
# the new rules let its client read.
# Connected clients keep their login until they reconnect.
#
# What only a broker with a password file or an ACL runs (the password check
# and its penalty, the re-checks against new rules) is secured.py, loaded
# by set_security with them: a board without users or ACL never loads it.

from common.broker.session import OWNER_UNKNOWN
from common.mqtt import consts as C

BAD_LOGIN = "bad user name or password"


def anonymous_allowed(broker, peer):
    """Whether a client without a user may connect through `peer`'s listener."""
    allow = broker.allow_anonymous
    if allow is not None:
        return allow
    return broker.users is None and (peer is None or peer[2])


def _anonymous_why(broker, peer):
    # (format, args) pairs: our words, not cut as client text would be (broker.words).
    if broker.allow_anonymous is False:
        return "anonymous client refused: allow_anonymous is false", ()
    if broker.users is not None:
        return "anonymous client refused: a password file is configured and allow_anonymous is not set (set it true to allow)", ()
    return "anonymous client refused: the listener is not loopback-only and no users are configured (set allow_anonymous = true, or configure a password file)", ()


def source_address(peer):
    """The peer's address without its port ("" without a peer)."""
    if peer is None:
        return ""
    text = peer[0]
    colon = text.rfind(":")
    return text[:colon] if colon > 0 else text


def login(broker, conn, pkt, now):
    """Decide who the client of `pkt` (a CONNECT) is; 0 or (reason, why).

    Sets conn.user (None: anonymous)."""
    peer = conn.peer
    identity = peer[1] if peer is not None else None
    users = broker.users
    if conn.user is not None:
        pass  # proved by enhanced authentication (SCRAM)
    elif identity is not None:
        conn.user = identity  # proved by the TLS client certificate
    elif broker.jwt is not None and broker.jwt.token_of(pkt) is not None:
        return broker.jwt.login(broker, conn, pkt, now)  # a signed token (jwt_auth.py)
    elif broker.hook is not None and pkt.username is not None:
        return broker.hook.login(broker, conn, pkt, now)  # asked outside (external_auth.py)
    elif users is not None and (pkt.username is not None or pkt.password is not None):
        from common.broker.secured import check_password  # (loaded with the users: set_security)

        address = source_address(peer)
        wait = check_password(broker, address, pkt.username, pkt.password, now)
        if wait:
            broker.stats.login_failed += 1
            held = ""
            if wait > 0:
                held = (": %d failed logins, no password checked for %d s", (broker.login_failures[address][0], wait))
            # (format, args): the client's text is cut and escaped (broker.words).
            why = BAD_LOGIN + " (user %s, client id %s, from %s%s)"
            return C.RC_BAD_USER_NAME_OR_PASSWORD, (why, (pkt.username, pkt.client_id, peer[0] if peer is not None else "-", held))
        conn.user = pkt.username
    if conn.user is None and not anonymous_allowed(broker, peer):
        return C.RC_NOT_AUTHORIZED, _anonymous_why(broker, peer)
    return 0


def owner_refusal(broker, conn, session, client_id):
    """None if the client of `conn` may take over or resume `session`; else
    the words of its refusal (counted; the log line names both users)."""
    owner = session.user
    if owner is OWNER_UNKNOWN:
        session.user = conn.user  # restored without its owner: claimed by the first who resumes it
        return None
    if owner == conn.user:
        return None
    broker.stats.denied_takeover += 1
    peer = conn.peer
    broker.log(
        30,
        "client id %s from %s (user %s) refused: its session belongs to user %s",
        (client_id, peer[0] if peer is not None else "-", _user_text(conn.user), _user_text(owner)),
    )
    return "client id in use by another user's session"


def _user_text(user):
    return "(anonymous)" if user is None else user


def grant(broker, conn, client_id):
    """Give the connection the ACL rules of its user and client id."""
    acl = broker.acl
    conn.acl = acl.for_client(conn.user, client_id) if acl is not None else None
    for extra in (broker.jwt, broker.hook):
        if extra is not None:
            extra.grant(broker, conn, client_id)  # a token's or a hook's rules
    if conn.acl is not None and conn.acl.refused is not None:
        broker.log(
            30,
            "client id %s (user %s): no ACL rules: a pattern would put a name holding +, # or / (or empty, or a leading $) into a filter",
            (client_id, _user_text(conn.user)),
        )


def set_security(broker, users, acl, allow_anonymous, now):
    """Install users (users.Users or None), rules (acl.Acl or None) and the
    anonymous switch (True, False, None = not set); re-check connected clients."""
    if users is not None or acl is not None or broker.jwt is not None or broker.hook is not None:
        # Loaded here, with the users or the rules (start-up, reload), so
        # that no CONNECT has to load it; a broker without either never does.
        from common.broker import secured
    broker.users = users
    broker.acl = acl
    broker.allow_anonymous = allow_anonymous
    for conn in broker.connections.by_id:
        session = conn.session
        if session is None or session.conn is not conn:
            continue
        conn.acl = acl.for_client(conn.user, session.client_id) if acl is not None else None
        for extra in (broker.jwt, broker.hook):
            if extra is not None:
                extra.grant(broker, conn, session.client_id)
        if conn.acl is not None:
            secured.recheck(broker, conn, session, now)
    if acl is not None:
        secured.recheck_wills(broker, acl, now)


def describe(broker):
    """The start-up (and reload) log line's words: what is on."""
    users = broker.users
    acl = broker.acl
    allow = broker.allow_anonymous
    if allow is None:
        anon = "only on loopback-only listeners (allow_anonymous not set)" if users is None else "refused (a password file is set, allow_anonymous not set)"
    else:
        anon = "allowed (allow_anonymous = true)" if allow else "refused (allow_anonymous = false)"
    return "users: %s; ACL: %s; anonymous clients: %s" % (
        "%d in the password file" % len(users) if users is not None else "none (no password file)",
        "%d rules, deny by default" % acl.rule_count() if acl is not None else "off (every client reads and writes every topic but $SYS/ writes)",
        anon,
    )
