# The parts of login (login.py) that only a broker with a password file or
# an ACL runs: the password check under the per-address penalty, and the
# re-checks of a session against new or changed rules. security_files.set_security
# loads this module when it installs users or rules, so that no CONNECT
# loads it; a broker without either (a board's default) never does.
# login.py's theory of operation describes the rules.

from common.broker import handle_publish, handle_subscribe, outbox

PENALTY_MAX_S = 60
PENALTY_ADDRESSES = 256


def check_password(broker, address, username, password, now):
    """Check `username` and `password` (bytes) against the password file
    (broker.users, set), under the penalty of the source `address`: 0 if
    they are right, -1 if not (the address is penalised), or the seconds
    its penalty still lasts (nothing is checked). MQTT's CONNECT and the
    host's HTTP basic auth (cpython_host/operations/http_server.py) share it, and one table."""
    failures = broker.login_failures
    entry = failures.get(address)
    if entry is not None and now < entry[1]:
        return entry[1] - now
    if not broker.users.check(username, password):
        _penalise(failures, address, now)
        return -1
    if entry is not None:
        del failures[address]
    return 0


def _penalise(failures, address, now):
    entry = failures.get(address)
    if entry is None:
        if len(failures) >= PENALTY_ADDRESSES:
            oldest = None
            for key in failures:  # (only on a failed login, at the bound)
                if oldest is None or failures[key][1] < failures[oldest][1]:
                    oldest = key
            del failures[oldest]
        entry = failures[address] = [0, 0]
    elif now > entry[1] + PENALTY_MAX_S:
        entry[0] = 0  # quiet for a while since its last penalty: start again at 1 s
    entry[0] += 1
    delay = 1 << (entry[0] - 1) if entry[0] < 8 else PENALTY_MAX_S
    entry[1] = now + (delay if delay < PENALTY_MAX_S else PENALTY_MAX_S)


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


def recheck_wills(broker, acl, now):
    """After new rules (`acl`, set): discard every held will, of a live
    client or waiting out its delay, that its owner may no longer publish:
    counted and logged as the PUBLISH would be (handle_publish.write_denied).
    A will kept here is judged again when it is sent."""
    refused = []
    for session in broker.sessions.by_client_id.values():
        will = session.will
        if will is not None:
            rules = session.conn.acl if session.conn is not None else acl.for_client(session.user, session.client_id)
            if handle_publish.write_denied(broker, rules, session, session.user, will[0].topic, now, "will"):
                refused.append(session)
    for session in refused:
        session.drop_will(broker.routing.messages)
