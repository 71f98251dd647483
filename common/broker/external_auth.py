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

from common.broker.login import source_address
from common.mqtt import consts as C

SERIAL_MAX = 1 << 29


class ExternalAuth:
    RULES_FROM = "the auth hook's"  # (the log's name for its answer's rules: granted.py)

    def __init__(self, ask):
        self.ask = ask
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
