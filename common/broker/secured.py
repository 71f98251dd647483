# The parts of login (login.py) that only a broker with a password file or
# an ACL runs: the password check under the login back-off (and the refusal
# of a wrong one), a client's rules from the ACL (and the line logged when
# a pattern leaves it none), and the re-checks of a session against new or
# changed rules. security_files.set_security loads this module when it
# installs users or rules, so that no CONNECT loads it; a broker without
# either (a board's default) never does (but for that log line, when the
# rules a JWT or an auth hook brought leave a client none).
# login.py's theory of operation describes the rules.

from common.broker import handle_publish, handle_subscribe, outbox
from common.broker.clienttext import user_name
from common.compat import const

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_RC_BAD_USER_NAME_OR_PASSWORD = const(0x86)

PENALTY_MAX_S = 60
PENALTY_ENTRIES = 256  # (address, user name) pairs held back; as many addresses' budgets
BUDGET_WINDOW_S = 60  # login_failures_per_address counts failures of this window
NAME_KEPT = 64  # characters of a user name its key keeps (a bound on the table's memory)


def password_login(broker, peer, address, pkt, now, users):
    """A CONNECT's user name and password (through `peer`, from `address`)
    checked against `users` (login.login): 0, or the refusal of a wrong or
    held-back one, (reason, why), counted in login_failed."""
    wait = check_password(broker, address, pkt.username, pkt.password, now, users)
    if not wait:
        return 0
    broker.stats.login_failed += 1
    held = held_why(broker, address, pkt.username, now) if wait > 0 else ""
    # (format, args): the client's text is cut and escaped (broker.words).
    why = "bad user name or password (user %s, client id %s, from %s%s)"
    return _RC_BAD_USER_NAME_OR_PASSWORD, (why, (pkt.username, pkt.client_id, peer[0] if peer is not None else "-", held))


def acl_rules(broker, acl, user, peer, client_id):
    """The rules `acl` gives a client (login.client_rules): its user's and
    client id's, and for a bridge's own local connection its grants too."""
    rules = acl.for_client(user, client_id)
    own = broker.bridge_grants.get(peer[0]) if peer is not None and rules.refused is None else None
    if own is not None:
        from common.broker.acl import ClientAcl

        rules = ClientAcl(own() + rules.rules)
    return rules


def no_rules_said(broker, user, client_id):
    """The log line of a CONNECT left no ACL rules (login.rules_for)."""
    broker.log(
        30,
        "client id %s (user %s): no ACL rules: a pattern would put a name holding +, # or / (or empty, or a leading $) into a filter",
        (client_id, user_name(user)),
    )


def check_password(broker, address, username, password, now, users=None):
    """Check `username` and `password` (bytes) against the password file
    (`users`, else broker.users, set), under the back-off of the source `address` and
    that user name, and the address's budget: 0 if they are right, -1 if
    not (that pair is held back, the address's budget spent by one), or
    the seconds a hold still lasts (nothing is checked). MQTT's CONNECT and
    the host's HTTP basic auth (cpython_host/operations/http_server.py) share it, and its tables."""
    failures = broker.login_failures
    key = (address, username[:NAME_KEPT] if username else username)
    entry = failures.get(key)
    if entry is not None and now < entry[1]:
        return entry[1] - now
    wait = _budget_wait(broker, address, now)
    if wait:
        return wait
    if users is None:
        users = broker.users
    if not users.check(username, password):
        _penalise(failures, key, now)
        _spend(broker.address_failures, address, now)
        return -1
    if entry is not None:
        del failures[key]  # (the address's budget is not given back: it only ages)
    return 0


def held_why(broker, address, username, now):
    """(format, args) of why a login from `address` as `username` is held
    back (check_password gave a wait): for the log line of the refusal."""
    entry = broker.login_failures.get((address, username[:NAME_KEPT] if username else username))
    if entry is not None and now < entry[1]:
        return ": %d failed logins of this user name from this address, no password checked for %d s", (entry[0], entry[1] - now)
    spent = broker.address_failures.get(address)
    count = spent[0] if spent is not None else 0
    return ": %d failed logins from this address within %d s (login_failures_per_address = %d), no password checked from it for %d s", (
        count,
        BUDGET_WINDOW_S,
        broker.settings.login_failures_per_address,
        _budget_wait(broker, address, now),
    )


def _budget_wait(broker, address, now):
    """Seconds the address's spent budget still holds its logins (0: none)."""
    spent = broker.address_failures.get(address)
    if spent is None or spent[0] < broker.settings.login_failures_per_address:
        return 0
    ends = spent[1] + BUDGET_WINDOW_S
    if now >= ends:
        return 0
    from common.broker.netmask import in_networks  # (only for an address over its budget)

    if in_networks(address, broker.settings.login_budget_exempt):
        return 0
    return ends - now


def _make_room(table):
    """Drop the entry whose time ([1]) is oldest (only on a failed login, at the bound)."""
    oldest = None
    for key in table:
        if oldest is None or table[key][1] < table[oldest][1]:
            oldest = key
    del table[oldest]


def _penalise(failures, key, now):
    entry = failures.get(key)
    if entry is None:
        if len(failures) >= PENALTY_ENTRIES:
            _make_room(failures)
        entry = failures[key] = [0, 0]
    elif now > entry[1] + PENALTY_MAX_S:
        entry[0] = 0  # quiet for a while since its last penalty: start again at 1 s
    entry[0] += 1
    delay = 1 << (entry[0] - 1) if entry[0] < 8 else PENALTY_MAX_S
    entry[1] = now + (delay if delay < PENALTY_MAX_S else PENALTY_MAX_S)


def _spend(budgets, address, now):
    """One failed login checked for `address`: [failures, window start]."""
    entry = budgets.get(address)
    if entry is None:
        if len(budgets) >= PENALTY_ENTRIES:
            _make_room(budgets)
        entry = budgets[address] = [0, now]
    elif now >= entry[1] + BUDGET_WINDOW_S:
        entry[0] = 0
        entry[1] = now
    entry[0] += 1


def recheck(broker, conn, session, now):
    """Remove the subscriptions of `session` that conn.acl no longer allows."""
    acl = conn.acl
    dropped = []
    for sub in session.subs.values():
        if not acl.may_subscribe(sub.filter):
            dropped.append(sub)
    for sub in dropped:
        broker.stats.denied_subscribe += 1
        broker.log(
            30,
            "%s: subscription %s removed: the ACL does not let user %s read every topic it matches",
            (session.client_id, sub.key, conn.user),
        )
        handle_subscribe.remove(broker, sub, now)


def drop_unreadable_inflight(broker, conn, session):
    """At resume, before the resend: the sent, unacknowledged messages its
    new client may not read are completed here (counted), rather than left
    in the window for an ack that cannot come. Later ones are filtered when
    sent (egress.send_publish)."""
    inflight = session.inflight
    i = 0
    while i < len(inflight):
        d = inflight[i]
        if d.msg is not None and not conn.acl.can_read(d.msg.topic):
            outbox.drop_inflight(broker, session, i)
            broker.stats.denied_delivery += 1
        else:
            i += 1


def recheck_wills(broker, security_of, now):
    """After new rules: discard every held will, of a live client or waiting
    out its delay, that its owner may no longer publish (by the rules of the
    listener it came in on: `security_of`, login.security_of, passed in as
    login imports this module): counted and logged as the PUBLISH would be
    (handle_publish.write_denied). A will kept here is judged again when it
    is sent."""
    refused = []
    for session in broker.sessions.by_client_id.values():
        will = session.will
        if will is not None:
            conn = session.conn
            if conn is not None:
                rules = conn.acl
            else:
                acl = security_of(broker, session.listener).acl
                rules = None if acl is None else acl.for_client(session.user, session.client_id)
            if rules is not None and handle_publish.write_denied(broker, rules, session, session.user, will[0].topic, now, "will"):
                refused.append(session)
    for session in refused:
        session.drop_will(broker.routing.messages)
