# Logins decided outside the core, asynchronously: the host's HTTP auth
# hook (cpython_host/auth/http_hook.py) is one.
#
# Theory of operation. The shell sets broker.hook to an ExternalAuth built
# around its ask(cid, serial, user, password, client_id, address). login()
# hands it every CONNECT that carries a user name and no token. ask()
# answers at once (the shell's cache) or returns None and answers later
# through answer(cid, serial, verdict, now); meanwhile the CONNECT waits in
# the connection's Extras.pending (connect_pending(): a second CONNECT
# closes the connection, as during a v5 AUTH exchange) and the connect
# timeout keeps running. A late answer for a connection that is gone (its
# serial no longer waits, or its Connection was reused: new Extras) is
# dropped. On the answer the CONNECT is checked again from the start
# (accept), and login() takes the verdict kept for it:
#
#     (allowed, rules, why, offline)
#
# allowed: the user is the CONNECT's user name; rules, a granted.shape()
# or None, are added to the file ACL's (granted.py). Refused: 3.1.1
# CONNACK 0x04 / v5 0x86, counted in login_failed; or, when `offline` (the
# service did not answer and nothing cached let the client in), 0x03 /
# 0x88 Server unavailable, counted in auth_offline_refused. An `offline`
# allow (a cached allow used while the service is away) is counted in
# auth_offline_allowed and logged. `why` goes to the log.
#
# Checks of each PUBLISH and SUBSCRIBE (optional: the shell sets ask_topic,
# the host's [security.http] acl_url). Before the broker handles a PUBLISH
# or SUBSCRIBE of a client with a user name (Broker.data_received),
# topics_known() asks ask_topic(cid, user, client_id, write, topic) for
# each topic (a PUBLISH's, resolved from its alias; each filter of a
# SUBSCRIBE). The shell answers from its cache (True / False) or asks
# and returns None: then the packet is put back in the client's reader and
# the client is held back (not read, as a rate limit holds it) until
# topic_answered(); nothing else waits. The verdicts of the packet let
# through are what denied() tells the handlers: a PUBLISH refused as the
# ACL refuses it (v5 PUBACK/PUBREC 0x87, 3.1.1 acknowledged and dropped,
# denied_publish), a filter with SUBACK 0x87 / 0x80 (denied_subscribe). A
# topic without a verdict is denied (fail-closed); the shell answers False
# for a service that does not answer.

from common.broker.login import source_address
from common.mqtt import consts as C

SERIAL_MAX = 1 << 29


class ExternalAuth:
    RULES_FROM = "the auth hook's"  # (the log's name for its answer's rules: granted.py)

    def __init__(self, ask):
        self.ask = ask
        self.ask_topic = None  # (cid, user, client id, write, topic) -> True, False, None (asked)
        self.verdicts = {}  # (write, topic) -> allowed: the packet being handled's
        self.holding = {}  # cid -> its Connection's Extras: held back for an answer
        self.serial = 0
        self.waiting = {}  # cid -> the serial of its question
        self.answers = {}  # cid -> the verdict the resumed CONNECT takes
        self.rules = {}  # cid -> (its Connection's Extras, rules) of an allow

    def login(self, broker, peer, pkt, found):
        """0 (found.user and .granted set: the CONNECT's handle_connect.Found),
        (reason, why), or (0, None): the CONNECT waits (handle_connect keeps
        it in its Extras.pending) for answer()."""
        cid = found.cid
        verdict = self.answers.pop(cid, None)
        if verdict is None:
            self.serial = self.serial + 1 if self.serial < SERIAL_MAX else 1
            verdict = self.ask(cid, self.serial, pkt.username, pkt.password, pkt.client_id, source_address(peer))
            if verdict is None:
                self.waiting[cid] = self.serial
                return 0, None
        allowed, rules, why, offline = verdict
        st = broker.stats
        where = (pkt.username, pkt.client_id, peer[0] if peer is not None else "-")
        if not allowed:
            if offline:
                st.auth_offline_refused += 1
                return C.RC_SERVER_UNAVAILABLE, (
                    "auth hook unreachable (%s): user %s, client id %s, from %s, has no cached allow",
                    (why,) + where,
                )
            st.login_failed += 1
            return C.RC_BAD_USER_NAME_OR_PASSWORD, (
                "auth hook refused user %s, client id %s, from %s: %s",
                where + (why,),
            )
        if offline:
            st.auth_offline_allowed += 1
            broker.log(
                30,
                "auth hook unreachable (%s): user %s, client id %s, from %s, let in on a cached allow",
                (why,) + where,
            )
        found.user = pkt.username
        found.granted = rules
        found.source = self
        return 0

    def attach(self, conn, found):
        """The accepted connection keeps the rules its allow carried (or
        loses an earlier connection's, its id reused)."""
        if found.source is self and found.granted is not None:
            self.rules[conn.cid] = (conn.extra(), found.granted)
        else:
            self.rules.pop(conn.cid, None)

    def answer(self, broker, cid, serial, verdict, now):
        """The shell's answer to ask(cid, serial, ...): the waiting CONNECT
        goes on. False when nothing waits for it any more (dropped)."""
        if self.waiting.get(cid) != serial:
            return False
        del self.waiting[cid]
        conn = broker.connections.by_id[cid]
        extras = conn.extras
        if extras is None or extras.pending is None or extras.method is not None:
            return False  # the connection is gone (or another's now)
        pkt = extras.pending
        extras.pending = None
        self.answers[cid] = verdict
        from common.broker.handle_connect import accept

        accept(broker, conn, pkt, now, None)
        self.answers.pop(cid, None)  # (a check before the login refused it)
        return True

    def granted(self, conn):
        """The rules its allow carried (a granted.shape()), or None."""
        entry = self.rules.get(conn.cid)
        return entry[1] if entry is not None and entry[0] is conn.extras else None

    def topics_known(self, broker, conn, ptype, pkt, now):
        """Before a PUBLISH or SUBSCRIBE is handled: True when the verdict
        on each of its topics is known (kept for denied()); False when one
        is asked, and the client is held back until topic_answered()."""
        verdicts = self.verdicts
        verdicts.clear()
        user = conn.user
        if user is None:
            return True  # (no user name: the anonymous rule and the file ACL judge it)
        if ptype == C.PUBLISH:
            write = True
            topics = (_publish_topic(conn, pkt),)
        else:
            write = False
            topics = [flt for flt, _options in pkt.topics]
        waiting = False
        client_id = conn.session.client_id
        for topic in topics:
            if topic is None:
                continue  # (an unknown alias: handle_publish refuses the packet)
            verdict = self.ask_topic(conn.cid, user, client_id, write, topic)
            if verdict is None:
                waiting = True
            else:
                verdicts[(write, topic)] = verdict
        if not waiting:
            return True
        cid = conn.cid
        self.holding[cid] = conn.extra()
        throttled = broker.throttled
        if cid not in throttled:
            if not throttled:
                broker.throttled_since = now
            throttled.append(cid)
            broker.throttle_changed = True
        return False

    def denied(self, conn, write, topic):
        """Whether the service refused (or did not judge) `topic` for the
        packet being handled; False for a client it does not judge."""
        if self.ask_topic is None or conn.user is None:
            return False
        return not self.verdicts.get((write, topic), False)

    def refused(self, broker, session, what, topic, now):
        """A PUBLISH or a filter denied(): counted as the ACL's refusals
        are (denied_publish, denied_subscribe), logged at most once a second."""
        st = broker.stats
        if what == "SUBSCRIBE":
            st.denied_subscribe += 1
        else:
            st.denied_publish += 1
        if now >= broker.denied_log_at:
            broker.denied_log_at = now + 1
            broker.log(30, "%s: %s %s refused by the auth hook (user %s)", (session.client_id, what, topic, session.conn.user))

    def topic_answered(self, broker, cid):
        """The shell has an answer for `cid`: read it again (its packet,
        back in its reader, is judged again from the shell's cache)."""
        extras = self.holding.pop(cid, None)
        if extras is None or broker.connections.by_id[cid].extras is not extras:
            return  # (gone, or another connection's now)
        rates = broker.rates
        if rates is not None and cid < len(rates.hit) and rates.hit[cid]:
            return  # (held for its rates too: ratelimit.py reads it again)
        if cid in broker.throttled:
            broker.throttled.remove(cid)
            broker.throttle_changed = True


def _publish_topic(conn, pkt):
    # The PUBLISH's topic, a v5 Topic Alias resolved without defining it
    # (handle_publish does that); None for an alias not defined yet.
    if pkt.topic:
        return pkt.topic
    extras = conn.extras
    aliases = None if extras is None else extras.aliases_in
    if aliases is None or not pkt.props:
        return None
    for prop_id, value in pkt.props:
        if prop_id == C.PROP_TOPIC_ALIAS:
            return aliases.get(value)
    return None
