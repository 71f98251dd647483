"""Read Mosquitto's persistence file (mosquitto.db, database format 5 and 6: Mosquitto 1.6 and 2.0).

The format, from Mosquitto's src/persist.h, persist_write.c, persist_read.c:
a 15-byte magic, a CRC (u32, always 0), the format version (u32 BE), then
chunks: a header (chunk type u32 BE, length u32 BE) and `length` bytes. The
fixed part of each chunk is a C struct written as it is in memory, so its
16- and 32-bit fields are in network order (htons/htonl) but its 64-bit
ones (message ids, times) are in the writer's byte order, and the structs
carry their padding:

  CFG 1         last_db_id u64, shutdown u8, dbid_size u8 (+6)           16
  MSG_STORE 2   store_id u64, expiry_time i64, payloadlen u32,
                source_mid, source_id_len, source_username_len,
                topic_len, source_port u16, qos u8, retain u8            32
                then source id, source username, topic, payload, and
                the v5 properties (a property length, then properties)
  CLIENT_MSG 3  store_id u64, mid u16, id_len u16, qos, state,
                retain_dup (retain << 4 | dup), direction u8             16
                then the client id and the properties
  RETAIN 4      store_id u64                                              8
  SUB 5         identifier u32, id_len u16, topic_len u16, qos u8,
                options u8 (no_local << 2 | retain_as_published << 3) (+2) 12
                then the client id and the topic filter
  CLIENT 6      session_expiry_time i64, session_expiry_interval u32,
                last_mid u16, id_len u16, listener_port u16 (v6),
                username_len u16 (v6) (+4)                           24 (v5: 16)
                then the client id and the user name

A chunk of an unknown type is skipped by its length. `read(path)` returns a
MosquittoDb; MosquittoDbError says what is wrong with a file it cannot read.
The 64-bit fields' byte order is the machine's (Mosquitto's own reader
assumes the same); a file from a machine of the other order is recognised
by its CFG chunk's dbid_size and last_db_id and refused.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

MAGIC = b"\x00\xb5\x00mosquitto db"
CHUNK_CFG, CHUNK_MSG_STORE, CHUNK_CLIENT_MSG, CHUNK_RETAIN, CHUNK_SUB, CHUNK_CLIENT = 1, 2, 3, 4, 5, 6

# Mosquitto's message states (lib/mosquitto_internal.h enum mosquitto_msg_state).
MS_PUBLISH_QOS0, MS_PUBLISH_QOS1, MS_WAIT_FOR_PUBACK = 1, 2, 3
MS_PUBLISH_QOS2, MS_WAIT_FOR_PUBREC, MS_RESEND_PUBREL = 4, 5, 6
MS_WAIT_FOR_PUBREL, MS_RESEND_PUBCOMP, MS_WAIT_FOR_PUBCOMP = 7, 8, 9
MS_SEND_PUBREC, MS_QUEUED = 10, 11
DIRECTION_IN, DIRECTION_OUT = 0, 1
NEVER = 0xFFFFFFFF  # session_expiry_interval: a 3.1.1 clean session 0, or v5 "does not expire"


class MosquittoDbError(Exception):
    """The file cannot be read as a mosquitto.db; the message says why."""


class Message:
    def __init__(self, store_id: int, topic: str, payload: bytes, qos: int, retain: bool, expiry: int, props: bytes):
        self.store_id = store_id
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.expiry = expiry  # wall time (s) it expires, 0 = never
        self.props = props  # encoded v5 properties (length first), b"" = none


class Client:
    def __init__(self, client_id: str, username: str | None, expiry_time: int, expiry_interval: int, last_mid: int):
        self.client_id = client_id
        self.username = username
        self.expiry_time = expiry_time  # wall time (s) the session expires, 0 = while connected
        self.expiry_interval = expiry_interval  # NEVER: does not expire
        self.last_mid = last_mid
        self.subs: list[tuple[str, int, int, int]] = []  # (filter, qos, options, identifier)
        self.msgs: list[ClientMsg] = []  # in the file's order: inflight then queued, in then out


class ClientMsg:
    def __init__(self, store_id: int, mid: int, qos: int, state: int, retain: bool, direction: int, props: bytes):
        self.store_id = store_id
        self.mid = mid
        self.qos = qos
        self.state = state
        self.retain = retain
        self.direction = direction
        self.props = props


class MosquittoDb:
    def __init__(self, version: int) -> None:
        self.version = version
        self.messages: dict[int, Message] = {}
        self.clients: dict[str, Client] = {}
        self.retained: list[int] = []  # store ids
        self.skipped: list[str] = []  # what could not be read, and why


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise MosquittoDbError(f"{what} is not UTF-8: {data[:40]!r}") from None


class _Chunk:
    """The bytes of one chunk, read in order."""

    def __init__(self, data: bytes, kind: str) -> None:
        self.data = data
        self.at = 0
        self.kind = kind

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise MosquittoDbError(f"a {self.kind} chunk is cut short ({len(self.data)} bytes)")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def rest(self) -> bytes:
        out = self.data[self.at :]
        self.at = len(self.data)
        return out


def read(path: str) -> MosquittoDb:
    """The contents of a mosquitto.db; MosquittoDbError if it is not one this reads."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise MosquittoDbError(f"{path}: {e.strerror}") from None
    if data[:15] != MAGIC:
        raise MosquittoDbError(f"{path}: not a Mosquitto persistence file (no 'mosquitto db' magic)")
    (version,) = struct.unpack(">I", data[19:23])
    if version not in (5, 6):
        raise MosquittoDbError(
            f"{path}: database format {version}; this reads 5 and 6 (Mosquitto 1.6 and 2.0): "
            "start the Mosquitto that wrote it once with a newer Mosquitto 2.0 to rewrite it"
        )
    db = MosquittoDb(version)
    end = len(data)
    at = 23
    order = "<" if sys.byteorder == "little" else ">"
    while at < end:
        if at + 8 > end:
            raise MosquittoDbError(f"{path}: ends inside a chunk header at byte {at}")
        kind, length = struct.unpack(">II", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        if len(body) != length:
            raise MosquittoDbError(f"{path}: the chunk at byte {at} is cut short (the file was being written?)")
        at += 8 + length
        _chunk(db, kind, body, order)
    return db


def _chunk(db: MosquittoDb, kind: int, body: bytes, order: str) -> None:
    if kind == CHUNK_CFG:
        c = _Chunk(body, "CFG")
        _last, _shutdown, dbid_size = c.unpack(order + "QBB")
        if dbid_size != 8:
            raise MosquittoDbError(f"message ids of {dbid_size} bytes; this reads 8 (Mosquitto 1.6, 2.0)")
    elif kind == CHUNK_MSG_STORE:
        c = _Chunk(body, "MSG_STORE")
        store_id, expiry = c.unpack(order + "Qq")
        payload_len, _mid, source_id_len, source_user_len, topic_len, _port, qos, retain = c.unpack(">IHHHHHBB")
        c.take(source_id_len + source_user_len)
        topic = _text(c.take(topic_len), "a topic")
        payload = c.take(payload_len)
        db.messages[store_id] = Message(store_id, topic, payload, qos, bool(retain), expiry, c.rest())
    elif kind == CHUNK_CLIENT:
        c = _Chunk(body, "CLIENT")
        (expiry_time,) = c.unpack(order + "q")
        expiry_interval, last_mid, id_len = c.unpack(">IHH")
        username_len = 0
        if db.version == 6:
            _port, username_len = c.unpack(">HH")
            c.take(4)  # the struct's padding
        client_id = _text(c.take(id_len), "a client id")
        username = _text(c.take(username_len), "a user name") if username_len else None
        old = db.clients.get(client_id)
        client = Client(client_id, username, expiry_time, expiry_interval, last_mid)
        if old is not None:  # (its subscriptions may have come first)
            client.subs, client.msgs = old.subs, old.msgs
        db.clients[client_id] = client
    elif kind == CHUNK_CLIENT_MSG:
        c = _Chunk(body, "CLIENT_MSG")
        (store_id,) = c.unpack(order + "Q")
        mid, id_len, qos, state, retain_dup, direction = c.unpack(">HHBBBB")
        client_id = _text(c.take(id_len), "a client id")
        msg = ClientMsg(store_id, mid, qos, state, bool(retain_dup >> 4), direction, c.rest())
        _client(db, client_id).msgs.append(msg)
    elif kind == CHUNK_RETAIN:
        (store_id,) = _Chunk(body, "RETAIN").unpack(order + "Q")
        db.retained.append(store_id)
    elif kind == CHUNK_SUB:
        c = _Chunk(body, "SUB")
        identifier, id_len, topic_len, qos, options = c.unpack(">IHHBB")
        c.take(2)  # the struct's padding
        client_id = _text(c.take(id_len), "a client id")
        flt = _text(c.take(topic_len), "a topic filter")
        _client(db, client_id).subs.append((flt, qos, options, identifier))
    else:
        db.skipped.append(f"a chunk of unknown type {kind} ({len(body)} bytes)")


def _client(db: MosquittoDb, client_id: str) -> Client:
    client = db.clients.get(client_id)
    if client is None:  # (not written by Mosquitto: its CLIENT chunk comes first)
        client = db.clients[client_id] = Client(client_id, None, 0, NEVER, 0)
    return client
