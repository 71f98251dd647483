# The broker state machine: connections in, bytes and decisions out.
#
# Theory of operation. The shell owns sockets and the clock; common/driver.py
# sits between the two. It tells the broker about each accepted connection,
# each chunk of received bytes and each lost connection, and calls tick() when
# the next deadline (conn_due, session_due) comes. The broker frames the
# bytes and decodes and dispatches each packet as its type's entries in
# DECODE, HANDLE and LEGAL_IN say (decoder, handler, legal states),
# and writes its answers through the output part (output.py: the
# connections' buffers and the gate that holds an ack until the store's
# sync), whose next_dirty() names the connections that have output or must
# be closed. The per-message packets (PUBLISH, its acks) are
# decoded into reused objects, a PUBLISH's topic through a cache of warm
# topic names (route.TopicCache) and its payload left in the frame until
# something keeps it: routing a warm QoS 0 message allocates nothing.
# Packet handling is split by family and job:
#   handle_connect   CONNECT (named checks that judge, then one step that
#                    applies what they found), DISCONNECT, AUTH
#   session_life     a session taken, resumed or taken over, detached,
#                    expired; wills
#   handle_publish   an inbound PUBLISH and PUBREL: checks, QoS 2, answer
#   route            who gets a message (the subscription trie, folding)
#   outbox           a session's queue and window: deliver, pump, resume,
#                    the queue_full policy, the client's PUBACK/PUBREC/PUBCOMP
#   egress           a PUBLISH encoded for one connection, a frame, an ack
#   handle_subscribe SUBSCRIBE, UNSUBSCRIBE; the retained replay a SUBSCRIBE
#                    starts goes out at the pace of the client's output (replay)
# Errors raised while decoding or handling a packet carry their reason code
# and become a DISCONNECT (v5) or a plain close (3.1.1) for that connection
# only; no input from the network can raise out of data_received().

from common.broker import handle_connect, handle_publish, handle_subscribe, outbox, replay, session_life
from common.broker.clienttext import words
from common.broker.connection import CLOSING, CONNECTED, FREE, NEW, REFUSAL_SLOTS, SILENT
from common.broker.route import REASON_MASK, route
from common.broker.topics import parse_shared
from common.compat import TICKS_MASK, const, ticks_deadline, ticks_diff, ticks_sooner
from common.mqtt import consts as C
from common.mqtt.codec import FrameReader
from common.mqtt.errors import MqttError, ProtocolError
from common.mqtt.packets import (
    Pingresp,
    Publish,
    connect_level,
    decode_packet,
    decode_packet_into,
    encode_packet,
)

# The wire constants this module uses, as private const()s with the values
# of common/mqtt/consts.py's names (tests/core/test_const_mirrors.py checks
# each): MicroPython folds them into the bytecode, where C.NAME takes a
# global and an attribute load at every use (about 1 KB of a board's heap
# over the per-packet modules, docs/boards.md).
_AUTH = const(15)
_CONNECT = const(1)
_DISCONNECT = const(14)
_LEVEL_311 = const(4)
_LEVEL_5 = const(5)
_PINGREQ = const(12)
_PUBACK = const(4)
_PUBLISH = const(3)
_RC_QUOTA_EXCEEDED = const(0x97)
_RC_SERVER_SHUTTING_DOWN = const(0x8B)
_RC_SERVER_UNAVAILABLE = const(0x88)
_SUBSCRIBE = const(8)
_UNSUBSCRIBE = const(10)

# Longest time (s) publishers are held back for subscribers that do not catch
# up; then they are read again and queue_full decides for as long.
THROTTLE_MAX_S = 30


def keep_alive_deadline(ms, keep_alive):
    """The tick from which a client last heard at tick `ms` is closed: one
    and a half times its keep-alive [MQTT-3.1.2-24] (5.0 [MQTT-3.1.2-22])
    after the END of millisecond `ms`. Its input came at some time within
    that millisecond and its CONNACK went out after it, so from the end on,
    no client measures less than 1.5 x keep-alive, however its clock rounds."""
    return ticks_deadline(ms, keep_alive * 1500 + 1)


# ------------------------------------------------------------ dispatch
# Each packet a client sends is decoded by DECODE[type] and handled by
# HANDLE[type] if LEGAL_IN[state] has its type's bit (the table of packet
# type -> decoder, handler, the connection states it is legal in, kept as
# columns: on a board a tuple per row would cost 300 B more). The
# per-message packets (PUBLISH, its acks) are decoded into reused objects;
# any other into a new one. A packet not legal in the connection's state:
# before CONNACK the connection is closed without an answer (the first
# packet must be CONNECT [MQTT-3.1.0-1]), after it that is a protocol error
# (a second CONNECT [MQTT-3.1.0-2], a packet only a server sends).


def _decode(broker, first, reader, level):
    return decode_packet(first, reader.buf, reader.start, reader.stop, level)


def _decode_publish(broker, first, reader, level):
    # Its payload stays in the frame (handle_publish copies it out only if
    # something keeps it), and its topic name comes from the cache of warm
    # names: routing a warm QoS 0 message allocates nothing.
    pkt = broker.inbound
    pkt.payload_at = decode_packet_into(pkt, first, reader.buf, reader.start, reader.stop, level, broker.topics)
    return pkt


def _decode_ack(broker, first, reader, level):
    pkt = broker.inbound_ack
    decode_packet_into(pkt, first, reader.buf, reader.start, reader.stop, level, None)
    return pkt


def _pingreq(broker, conn, pkt, now):
    broker.output.write(conn, PINGRESP_BYTES)


PINGRESP_BYTES = encode_packet(Pingresp(), _LEVEL_311)

# Packet type -> how it is decoded (type 0 is refused by the codec).
DECODE = (
    _decode,  # 0 reserved
    _decode,  # 1 CONNECT
    _decode,  # 2 CONNACK
    _decode_publish,  # 3 PUBLISH
    _decode_ack,  # 4 PUBACK
    _decode_ack,  # 5 PUBREC
    _decode_ack,  # 6 PUBREL
    _decode_ack,  # 7 PUBCOMP
    _decode,  # 8 SUBSCRIBE
    _decode,  # 9 SUBACK
    _decode,  # 10 UNSUBSCRIBE
    _decode,  # 11 UNSUBACK
    _decode,  # 12 PINGREQ
    _decode,  # 13 PINGRESP
    _decode,  # 14 DISCONNECT
    _decode,  # 15 AUTH
)

# Packet type -> its handler; None for the packets only a server sends.
HANDLE = (
    None,  # 0 reserved
    handle_connect.handle_connect,  # 1 CONNECT
    None,  # 2 CONNACK
    handle_publish.handle_publish,  # 3 PUBLISH
    outbox.handle_puback,  # 4 PUBACK
    outbox.handle_pubrec,  # 5 PUBREC
    handle_publish.handle_pubrel,  # 6 PUBREL
    outbox.handle_pubcomp,  # 7 PUBCOMP
    handle_subscribe.handle_subscribe,  # 8 SUBSCRIBE
    None,  # 9 SUBACK
    handle_subscribe.handle_unsubscribe,  # 10 UNSUBSCRIBE
    None,  # 11 UNSUBACK
    _pingreq,  # 12 PINGREQ
    None,  # 13 PINGRESP
    handle_connect.handle_disconnect,  # 14 DISCONNECT
    handle_connect.handle_auth,  # 15 AUTH
)

# Connection state -> the packet types legal in it, as bits (1 << type):
# before CONNACK only CONNECT, and AUTH for its exchange; after it every
# packet a client sends but CONNECT.
LEGAL_IN = (
    0,  # FREE
    1 << _CONNECT | 1 << _AUTH,  # NEW
    1 << _PUBLISH | 0xF << _PUBACK | 1 << _SUBSCRIBE | 1 << _UNSUBSCRIBE | 1 << _PINGREQ | 3 << _DISCONNECT,  # CONNECTED
    0,  # CLOSING
)


# (For the host's type checker only: the classes of the attributes below.)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from common.broker.acl import Acl
    from common.broker.routing_table import Routing
    from common.broker.session import Sessions
    from common.broker.stats import Stats
    from common.broker.users import Users


class Broker:
    """The sans-I/O MQTT broker. See docs/architecture.md for the shell API."""

    # Attributes broker_setup.set_up gives a broker, named here for the
    # host's type checker, which does not follow them there (annotations
    # only: MicroPython compiles them to nothing).
    settings: "Any"  # settings.Settings (limits.Limits on a board)
    listener: "Any"  # listener.StateListener, or the store's Persist
    stats: "Stats"
    routing: "Routing"
    sessions: "Sessions"
    users: "Users | None"
    acl: "Acl | None"
    rates: "Any"  # ratelimit.RateLimits or None
    connect_rate: "Any"  # connect_rate.ConnectRate or None

    def __init__(self, settings, entropy, listener=None):
        """`listener` hears every state change worth keeping (common/broker/listener.py):
        the store layer's Persist when persistence is on (then call restore()
        before the first connection), else None for the null listener. The
        attributes and parts are broker_setup.py's (start-up only on a board)."""
        from common.broker.broker_setup import set_up

        set_up(self, settings, entropy, listener)

    def set_logger(self, logger, level=0):
        """Send the core's log lines of `level` and above to logger(level, text)."""
        self.logger = logger
        self.log_level = level

    def log(self, level, fmt, args):
        # The core's logging boundary: `fmt` is ours, every argument is data
        # (words()): client ids, user names and topics come from the network,
        # so each is cut to CLIENT_TEXT_MAX characters and escaped, and none
        # may forge, hide or flood a log line.
        if self.logger is not None and level >= self.log_level:
            self.logger(level, words((fmt, args)))

    def client_name(self, conn):
        session = conn.session
        return session.client_id if session is not None else "#%d" % conn.cid

    # ---------------------------------------------------------------- shell API

    # `now` is whole seconds (MQTT timers); `ms` the shell's wrapping ms ticks
    # (compat.ticks_diff) for the connection deadlines. Callers that run the
    # broker in whole seconds (the tests' harness) leave `ms` out.

    def connection_made(self, now, ms=None, peer=None):
        """Register an accepted connection; its id, or -1 to close it at once.

        `peer`, from the shell: None, or a tuple (address, identity, local
        [, listener]):
        the peer's address as text for the log ("192.0.2.7:50432"), the
        identity its TLS client certificate proved (None: none), and whether
        the listener it came in on listens on loopback only (what anonymous
        access depends on), and the listener's index from 0 (its shared
        listener_rate_* bucket; left out: 0). None counts as a local peer
        without identity.
        """
        if self.started is None:
            self.started = now
        s = self.settings
        refuse = 0
        live = self.connections.live
        if live >= s.max_connections:
            if live >= s.max_connections + REFUSAL_SLOTS:
                self.stats.refused_connections += 1
                return -1
            refuse = _RC_SERVER_UNAVAILABLE
        conn = self.connections.open()
        conn.state = NEW
        conn.reader = FrameReader(s.max_packet_size)
        if ms is None:
            ms = (now * 1000) & TICKS_MASK
        conn.deadline = self._due(ticks_deadline(ms, s.connect_timeout * 1000))
        if refuse:
            conn.extra().refuse_reason = refuse
        conn.peer = peer
        if peer is not None and len(peer) > 3:
            policy = self.listener_policies.get(peer[3])
            if policy is not None and policy.mount is not None:
                conn.extra().mount = policy.mount
        self.output.opened(conn.cid)
        if self.rates is not None:
            self.rates.opened(conn.cid, now, ms, peer)
        self.stats.connections_total += 1
        return conn.cid

    def data_received(self, cid, data, now, ms=None):
        """Feed bytes received on connection `cid`."""
        conn = self.connections.by_id[cid]
        reader = conn.reader
        was_new = conn.state == NEW
        if was_new:
            if data and data[0] != 0x10 and not conn.connect_pending() and not reader.pending():
                # [MQTT-3.1.0-1] the first byte of a stream must be a CONNECT's:
                # a peer that does not speak MQTT (an HTTP GET) is closed now
                # (refusal.py: rare).
                from common.broker.refusal import not_a_connect

                not_a_connect(self, conn, data, now)
                return
        elif conn.state != CONNECTED:
            return  # closing: the rest of the input is discarded
        self.stats.bytes_received += len(data)
        rates = self.rates
        if rates is not None and not was_new:
            # (Its buckets earn up to this read before it is charged.)
            rates.reading(self, conn, (now * 1000) & TICKS_MASK if ms is None else ms, reader.pending() + len(data))
        try:
            reader.feed(data)
            while conn.state == NEW or conn.state == CONNECTED:
                if self.replaying and cid in self.replaying:
                    break  # the rest waits in the reader until the replay ends
                first = reader.next_frame()
                if first < 0:
                    break
                ptype = first >> 4
                pkt = DECODE[ptype](self, first, reader, conn.level)
                if LEGAL_IN[conn.state] >> ptype & 1:
                    hook = self.hook
                    if (
                        hook is not None
                        and hook.ask_topic is not None
                        and (ptype == _PUBLISH or ptype == _SUBSCRIBE)
                        and not hook.topics_known(self, conn, ptype, pkt, now)
                    ):
                        reader.again()  # (it waits for the hook's answer: external_auth.py)
                        break
                    HANDLE[ptype](self, conn, pkt, now)
                elif conn.state == NEW:
                    self.close(conn, now, publish_will=False)  # not legal before CONNACK (above)
                else:
                    raise ProtocolError("%s not allowed from a client" % C.PACKET_NAMES[ptype])
                if self.throttled and cid in self.throttled:
                    break  # the rest waits in the reader until it is released
            reader.keep()  # the shell may read into `data`'s buffer again
        except MqttError as err:
            if conn.state == NEW and not conn.connect_pending():
                # A CONNECT that failed its checks: answered in its own dialect
                # when its level byte is readable (fail()).
                conn.level = _LEVEL_5 if connect_level(reader.buf) == _LEVEL_5 else _LEVEL_311
            name = self.client_name(conn)
            self.log(30, "closing %s: %s; sent %s", (name, err.msg, self.fail(conn, err.reason, now, text=err.msg)))
            return
        except MemoryError:
            # No block for what this packet needs (a board's heap: too small
            # for max_packet_size, or in pieces). Not a bug: this connection
            # is closed (v5: Quota exceeded), the others go on. A message it
            # was publishing got no acknowledgement, so its client resends it.
            self.stats.closed_out_of_memory += 1
            name = self.client_name(conn)
            sent = self.fail(conn, _RC_QUOTA_EXCEEDED, now, text="out of memory")
            self.log(
                40,
                "closing %s: out of memory handling its packet (max_packet_size %d; closed_out_of_memory %d); sent %s",
                (name, self.settings.max_packet_size, self.stats.closed_out_of_memory, sent),
            )
            return
        finally:
            if rates is not None and rates.free == cid:
                rates.settle(self, conn, now)  # (a read charged after it: ratelimit.py)
        if conn.state == CONNECTED and conn.keep_alive:
            if ms is None:
                ms = (now * 1000) & TICKS_MASK
            conn.deadline = keep_alive_deadline(ms, conn.keep_alive)
            if was_new:
                self._due(conn.deadline)  # may come before the connect timeout

    def _due(self, deadline):
        # Keep conn_due at or before every connection deadline.
        self.conn_due = ticks_sooner(self.conn_due, deadline)
        return deadline

    def connection_lost(self, cid, now):
        """The socket is closed (by the peer, an error, or after is_closing)."""
        conn = self.connections.by_id[cid]
        if conn.state == FREE:
            return
        if conn.state != CLOSING:
            if conn.state == CONNECTED:
                self.log(20, "%s disconnected without DISCONNECT", (self.client_name(conn),))
            session_life.end(self, conn, now)
        if cid in self.throttled:
            self.throttled.remove(cid)
        if self.rates is not None:
            self.rates.closed(cid)
        self.output.lost(cid)
        self.connections.release(conn)

    def tick(self, now, ms=None):
        """Run the timers that are due (see conn_due and session_due)."""
        if self.started is None:
            self.started = now
        if ms is None:
            ms = (now * 1000) & TICKS_MASK
        if self.conn_due and ticks_diff(ms, self.conn_due) >= 0:
            self._connection_timers(now, ms)
        if self.throttled and now - self.throttled_since >= THROTTLE_MAX_S:
            # A subscriber that does not catch up must not stall publishers
            # for ever: read them again, and let queue_full decide for a while.
            self.log(
                30,
                "%d publisher(s) held back for %d s by a subscriber that does not catch up: reading them again; queue_full (%s) applies for %d s",
                (len(self.throttled), THROTTLE_MAX_S, self.settings.queue_full, THROTTLE_MAX_S),
            )
            self.release_throttled()
            self.throttle_off_until = now + THROTTLE_MAX_S
        # Session timers are whole seconds: strictly after, so a timer never
        # fires before its full time has passed.
        if self.session_due and now > self.session_due:
            self.session_due = session_life.run_session_timers(self, now)
        if self.replaying:
            replay.close_stalled(self, now)
        if self.jwt is not None:
            self.jwt.tick(self, now, ms)  # tokens that expired during their session
        if self.rates is not None:
            self.rates.tick(self, now, ms)

    def _connection_timers(self, now, ms):
        # Close what expired; conn_due becomes the earliest deadline left.
        due = 0
        for conn in self.connections.by_id:
            deadline = conn.deadline
            if deadline <= 0:
                continue
            if ticks_diff(ms, deadline) < 0:
                due = ticks_sooner(due, deadline)
                continue
            if conn.state == CONNECTED and (conn.cid in self.throttled or conn.cid in self.replaying):
                # Not read by our choice: its silence is ours, not its own.
                conn.deadline = keep_alive_deadline(ms, conn.keep_alive)
                due = ticks_sooner(due, conn.deadline)
                continue
            if conn.state == NEW or conn.state == CONNECTED:
                from common.broker.refusal import timed_out  # (a connect timeout, a keep-alive expired)

                timed_out(self, conn, now)
            conn.deadline = SILENT
        self.conn_due = due

    # ------------------------------------------------- publisher throttle

    def throttle(self, conn, now):
        """Stop reading a publisher whose messages pile up in an online
        subscriber's queue (above half of max_queued_messages or bytes,
        at most routing.THROTTLE_COUNT messages or THROTTLE_BYTES):
        TCP then slows it down instead of the queue overflowing."""
        if now < self.throttle_off_until or conn.cid in self.throttled:
            return
        if not self.throttled:
            self.throttled_since = now
        self.throttled.append(conn.cid)
        self.throttle_changed = True

    def release_throttled(self):
        """A queue drained (below half its high-water mark) or its subscriber left: read
        the publishers again; one still outrunning is throttled again. Those held
        back for their rate limits stay held: ratelimit.py reads them again once
        their debt is paid (released here, each drained queue let one more
        PUBLISH of theirs through: 2,468/s against rate_messages 50 with a QoS 1
        subscriber)."""
        throttled = self.throttled
        if not throttled:
            return
        rates = self.rates
        i = 0
        while i < len(throttled):
            cid = throttled[i]
            if rates is not None and cid < len(rates.hit) and rates.hit[cid] and rates.in_debt(cid):
                i += 1
            else:
                del throttled[i]
                self.throttle_changed = True

    def take_throttle_changes(self):
        """True once after the set of throttled publishers changed (the driver)."""
        changed = self.throttle_changed
        self.throttle_changed = False
        return changed

    # ------------------------------------------------- retained replays

    def run_replays(self, now):
        """Go on with the retained replays whose output has drained (the
        driver, before each flush)."""
        replay.run(self, now)

    def replays_waiting(self):
        """True if a pending replay's output is not paused: flush again soon."""
        return replay.waiting(self)

    def take_replay_changes(self):
        """True once after the set of connections with a pending replay changed (the driver)."""
        changed = self.replay_changed
        self.replay_changed = False
        return changed

    def restore(self, now, wall):
        """Load the persistent state from the store (once, before serving).

        `wall` is the wall-clock time in seconds matching `now`, so expiry
        keeps running across a restart. Returns counts of what came back
        (common/startup.py logs them).
        """
        counts = self.listener.restore(self, now, wall)
        self.session_due = now  # restored wills and expiries: scan at the next second
        return counts

    def sync_store(self):
        """Make every stored change durable now (the store's fsync)."""
        self.listener.sync()

    def snapshot(self):
        """The public counters ($SYS, metrics): a new dict of name -> int
        (sys_topics.snapshot; loaded with $SYS or by the host's views)."""
        from common.broker.sys_topics import snapshot

        return snapshot(self)

    def shutdown(self, now):
        """Close every connection; v5 clients hear DISCONNECT 0x8B first."""
        for conn in self.connections.by_id:
            if conn.state == CONNECTED:
                self.fail(conn, _RC_SERVER_SHUTTING_DOWN, now, publish_will=False)
            elif conn.state == NEW:
                self.close(conn, now)
        listener = self.listener
        for session in self.sessions.by_client_id.values():  # (order does not matter: one record each)
            listener.window_saved(session)
        self.sync_store()

    def publish(self, topic, payload, qos, retain, now):
        """Publish a message from the broker itself ($SYS, bridge); a v5 reason code."""
        return route(self, None, Publish(topic, None, qos, retain), payload, 0, now) & REASON_MASK

    # ------------------------------------------------------ used by handlers

    def add_subscription(self, session, flt):
        """A new subscription of `session` to the valid filter `flt`, routed;
        None if the pool is full. Its options are the defaults until
        set_options(). (SUBSCRIBE and the persistence listener's restore.)"""
        sub = self.sessions.sub_pool.alloc()
        if sub is None:
            return None
        share_name, inner = parse_shared(flt)
        sub.session = session
        sub.key = flt
        sub.filter = inner
        session.subs[flt] = sub
        self.routing.add(sub, share_name)
        return sub

    def close(self, conn, now, publish_will=True):
        """Start closing a connection: no more input, output flushed by the shell."""
        if conn.state == CLOSING or conn.state == FREE:
            return
        session_life.end(self, conn, now, publish_will)
        conn.state = CLOSING
        conn.deadline = 0
        self.output.closing(conn)

    def close_id(self, cid, now):
        """The shell ends connection `cid` for a reason of its own (Driver.close)."""
        self.close(self.connections.by_id[cid], now)

    def fail(self, conn, reason, now, publish_will=True, text=None):
        """Close after an error, telling the client `reason` where its protocol
        can (`text`: the v5 Reason String); what it was sent, in words for the
        log line (refusal.py, loaded by the first failure)."""
        try:
            from common.broker.refusal import fail
        except MemoryError:
            # No heap left to load it (data_received's MemoryError): the
            # connection is closed all the same, its client told nothing.
            self.close(conn, now, publish_will)
            return "no code (no heap to load refusal.py)"
        return fail(self, conn, reason, now, publish_will, text)
