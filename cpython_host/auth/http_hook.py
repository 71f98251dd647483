"""The HTTP auth hook ([security.http]): a CONNECT with a user name is
allowed or refused by a web service, asked asynchronously; the core's side
is common/broker/external_auth.py.

Theory of operation. ask() is the core's question (from inside
Broker.data_received, on the event loop). The cache answers at once when it
can: an allow younger than `cache_ttl` seconds, a refusal younger than
`negative_ttl`. Its key is the whole of what was asked (user name, client
id, a SHA-256 of the password), so a client id or a wrong password can
never replace another's entry. Otherwise a task POSTs

    {"username": ..., "password": ..., "clientid": ..., "ip": ...}

to `url` (HTTP/1.1, Connection: close; https with the system's CAs) and
the core waits (its connect timeout keeps running). The answer:
  - 200 with a JSON object {"allow": true|false, "acl": {...}} ("ok" and
    "Ok" are read as "allow", as mosquitto-go-auth's json mode writes it; "acl" in
    common/broker/granted.py's shape), or with `response = "status"` any
    2xx allows: allowed or refused, and cached;
  - any 4xx: refused, and cached;
  - no answer within `timeout`, a refused connection, a 5xx, a body that
    is not that JSON: the service is unreachable ("no answer"). Then the
    client is let in only if an allow for exactly its credentials came from
    the service less than `offline_grace` seconds ago; any other client is
    refused (fail-closed: CONNACK 0x03 / 0x88). Both decisions are counted
    ($SYS/broker/clients/auth_offline/allowed, .../refused) and logged by
    the core; the failures themselves are logged here, at most one line a
    second (with the number left out).
With `acl_url` set, each PUBLISH and SUBSCRIBE of a client with a user
name is judged too (common/broker/external_auth.py holds that client, and
only it, while its question is out): POST acl_url

    {"username": ..., "clientid": ..., "topic": ..., "acc": 2 | 1}

(acc 2: publish, 1: subscribe, as mosquitto-go-auth's aclcheck), read as
the login's answer (2xx allow / refuse, 4xx refuse) and cached by (user
name, client id, topic, acc) for cache_ttl / negative_ttl. No answer is a
refusal (fail-closed) unless the service allowed exactly that check (same
user, client id, topic, acc) less than `offline_grace` seconds ago, as for
a CONNECT: the verdict is kept NO_ANSWER_TTL s (so that an unreachable
service is not asked again by every packet), counted
($SYS/broker/clients/auth_offline/checks_allowed, .../checks_refused) and
logged with the failure (one line a second). An allow given offline does
not renew the grace: it runs from the service's last real allow.
At most `max_pending` questions are in flight; one more is a "no answer".
The answer goes to the core through the driver (external_auth.answer, then
a flush): the CONNACK leaves at once.

SIGHUP (reload_hook): the table read again makes a new hook. What the
core's ExternalAuth holds (the CONNECTs waiting for an answer, the rules
each connected client's allow brought) carries over, so an answer asked
before the reload still reaches its CONNECT; the cache (and with it the
offline grace) carries over while the url stays the same, and is dropped
when it changes (another service's answers). The table removed: no hook;
connected clients keep their connection, judged by the file rules alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

from common.broker.external_auth import ExternalAuth

log = logging.getLogger("siskin.host")

BODY_MAX = 65536  # bytes of an answer read at most
NO_ANSWER_TTL = 1.0  # s a topic check's "no answer" (a refusal) is kept: its held packet takes it
Verdict = tuple[bool, Any, str, bool]


class NoAnswer(Exception):
    """The service did not give a usable answer (its words for the log)."""


class HttpAuth:
    def __init__(self, driver: Any, options: dict[str, Any], clock: Any = time.monotonic) -> None:
        self.driver = driver
        self.url = options["url"]
        self.target = _target("url", self.url)
        self.acl_url = options.get("acl_url", "")
        self.acl_target = _target("acl_url", self.acl_url) if self.acl_url else None
        self.timeout = options.get("timeout", 2.0)
        self.cache_ttl = options.get("cache_ttl", 300)
        self.negative_ttl = options.get("negative_ttl", 30)
        self.offline_grace = options.get("offline_grace", 600)
        self.status_only = options.get("response", "json") == "status"
        self.max_pending = options.get("max_pending", 64)
        self.cache_entries = options.get("cache_entries", 10000)
        self.clock = clock
        # (user, client id, sha256(password)) -> (allowed, rules, when the service said so)
        self.cache: dict[tuple[str, str, bytes], tuple[bool, Any, float]] = {}
        # (user, client id, publish?, topic) -> (allowed, when, for how long, when the service last
        # allowed it: 0.0 never); and the cids held for one
        self.topic_cache: dict[tuple[str, str, bool, str], tuple[bool, float, float, float]] = {}
        self.topic_waiting: dict[tuple[str, str, bool, str], set[int]] = {}
        # (cid, check) -> the verdict a held packet of that cid takes when it is read again,
        # whatever the cache keeps (cache_ttl 0 keeps nothing)
        self.topic_owed: dict[tuple[int, tuple[str, str, bool, str]], bool] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.failures = 0  # answers that were not usable (the log's count)
        self.logged_at = 0.0
        self.unlogged = 0

    def install(self) -> ExternalAuth:
        """Make the broker ask this hook; its ExternalAuth."""
        hook = ExternalAuth(self.ask)
        if self.acl_target is not None:
            hook.ask_topic = self.ask_topic
        self.driver.broker.hook = hook
        return hook

    # ------------------------------------------------------------ the core's question

    def ask(
        self, cid: int, serial: int, user: str, password: bytes | None, client_id: str, address: str
    ) -> Verdict | None:
        key = (user, client_id, hashlib.sha256(password or b"").digest())
        entry = self.cache.get(key)
        now = self.clock()
        if entry is not None:
            age = now - entry[2]
            if entry[0] and age < self.cache_ttl:
                return True, entry[1], "cached allow", False
            if not entry[0] and age < self.negative_ttl:
                return False, None, "cached refusal", False
        if len(self.tasks) >= self.max_pending:
            return self._no_answer(key, f"{self.max_pending} checks already waiting (max_pending)")
        body = {
            "username": user,
            "password": (password or b"").decode("utf-8", "replace"),
            "clientid": client_id,
            "ip": address,
        }
        task = asyncio.get_running_loop().create_task(self._check(cid, serial, key, body))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return None

    async def _check(self, cid: int, serial: int, key: tuple[str, str, bytes], body: dict[str, Any]) -> None:
        try:
            verdict = await asyncio.wait_for(self._post(key, body), self.timeout)
        except asyncio.TimeoutError:
            verdict = self._no_answer(key, f"no answer within {self.timeout} s")
        except NoAnswer as e:
            verdict = self._no_answer(key, str(e))
        except (OSError, EOFError, asyncio.LimitOverrunError, ValueError) as e:
            verdict = self._no_answer(key, f"{type(e).__name__}: {e}")
        driver = self.driver
        driver.clock()
        if driver.broker.hook is not None:
            driver.broker.hook.answer(driver.broker, cid, serial, verdict, driver.now)
        driver.flush()

    def _failed(self, url: str, why: str) -> float:
        """Count and log (one line a second) a question without a usable answer; now."""
        self.failures += 1
        now: float = self.clock()
        if now - self.logged_at >= 1:
            more = f" ({self.unlogged} more not logged)" if self.unlogged else ""
            log.warning("auth hook %s: %s; failures so far %d%s", url, why, self.failures, more)
            self.logged_at = now
            self.unlogged = 0
        else:
            self.unlogged += 1
        return now

    def _no_answer(self, key: tuple[str, str, bytes], why: str) -> Verdict:
        now = self._failed(self.url, why)
        entry = self.cache.get(key)
        if entry is not None and entry[0] and now - entry[2] < self.offline_grace:
            return True, entry[1], why, True
        return False, None, why, True

    # ------------------------------------------------------------ HTTP

    async def _post(self, key: tuple[str, str, bytes], body: dict[str, Any]) -> Verdict:
        status, answer = await _exchange(self.target, body)
        if 400 <= status < 500:
            self._remember(key, False, None)
            return False, None, f"HTTP {status}", False
        if not 200 <= status < 300:
            raise NoAnswer(f"HTTP {status}")
        if self.status_only:
            self._remember(key, True, None)
            return True, None, f"HTTP {status}", False
        allowed, rules = _judge(answer)
        self._remember(key, allowed, rules)
        return allowed, rules, f"HTTP {status}", False

    # ------------------------------------------------------------ PUBLISH / SUBSCRIBE checks

    def ask_topic(self, cid: int, user: str, client_id: str, write: bool, topic: str) -> bool | None:
        """The core's question for a PUBLISH (write) or a filter: the cached
        verdict, or None (asked; external_auth.topic_answered when it comes)."""
        key = (user, client_id, write, topic)
        owed = self.topic_owed.pop((cid, key), None)
        if owed is not None:
            return owed
        entry = self.topic_cache.get(key)
        if entry is not None and self.clock() - entry[1] < entry[2]:
            return entry[0]
        waiting = self.topic_waiting.get(key)
        if waiting is not None:
            waiting.add(cid)  # (one question for all who wait for it)
            return None
        if len(self.tasks) >= self.max_pending:
            self._failed(self.acl_url, f"{self.max_pending} checks already waiting (max_pending)")
            return False
        self.topic_waiting[key] = {cid}
        body = {"username": user, "clientid": client_id, "topic": topic, "acc": 2 if write else 1}
        task = asyncio.get_running_loop().create_task(self._check_topic(key, body))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return None

    async def _check_topic(self, key: tuple[str, str, bool, str], body: dict[str, Any]) -> None:
        try:
            allowed, ttl = await asyncio.wait_for(self._post_topic(body), self.timeout)
            allowed_at = self.clock() if allowed else 0.0
        except asyncio.TimeoutError:
            allowed, allowed_at = self._topic_no_answer(key, f"no answer within {self.timeout} s")
            ttl = NO_ANSWER_TTL
        except NoAnswer as e:
            allowed, allowed_at = self._topic_no_answer(key, str(e))
            ttl = NO_ANSWER_TTL
        except (OSError, EOFError, asyncio.LimitOverrunError, ValueError) as e:
            allowed, allowed_at = self._topic_no_answer(key, f"{type(e).__name__}: {e}")
            ttl = NO_ANSWER_TTL
        cache = self.topic_cache
        cache.pop(key, None)
        if len(cache) >= self.cache_entries:
            del cache[next(iter(cache))]  # the oldest answer
        cache[key] = (allowed, self.clock(), ttl, allowed_at)
        driver = self.driver
        driver.clock()
        hook = driver.broker.hook
        owed = self.topic_owed
        for cid in self.topic_waiting.pop(key, ()):
            if len(owed) >= self.cache_entries:
                del owed[next(iter(owed))]  # (a connection gone before it was read again)
            owed[(cid, key)] = allowed
            if hook is not None:
                hook.topic_answered(driver.broker, cid)
        driver.flush()

    def _topic_no_answer(self, key: tuple[str, str, bool, str], why: str) -> tuple[bool, float]:
        """A check acl_url did not answer: (allowed, when the service last allowed it).
        Allowed only on the service's own allow of the same check within offline_grace."""
        entry = self.topic_cache.get(key)
        allowed_at = entry[3] if entry is not None else 0.0
        st = self.driver.broker.stats
        user, client_id, write, topic = key
        what = f"user {user}, client id {client_id}, {'PUBLISH to' if write else 'SUBSCRIBE'} {topic}"
        if allowed_at and self.clock() - allowed_at < self.offline_grace:
            st.auth_offline_checks_allowed += 1
            self._failed(
                self.acl_url, f"{why}: {what} allowed on a cached allow (offline_grace {self.offline_grace} s)"
            )
            return True, allowed_at
        st.auth_offline_checks_refused += 1
        self._failed(self.acl_url, f"{why}: {what} refused, no allow within offline_grace {self.offline_grace} s")
        return False, 0.0

    async def _post_topic(self, body: dict[str, Any]) -> tuple[bool, float]:
        assert self.acl_target is not None
        status, answer = await _exchange(self.acl_target, body)
        if 400 <= status < 500:
            return False, self.negative_ttl
        if not 200 <= status < 300:
            raise NoAnswer(f"HTTP {status}")
        allowed = True if self.status_only else _judge(answer)[0]
        return allowed, self.cache_ttl if allowed else self.negative_ttl

    def _remember(self, key: tuple[str, str, bytes], allowed: bool, rules: Any) -> None:
        cache = self.cache
        cache.pop(key, None)
        if len(cache) >= self.cache_entries:
            del cache[next(iter(cache))]  # the oldest answer
        cache[key] = (allowed, rules, self.clock())


Target = tuple[str, int, "ssl.SSLContext | None", str]


def _target(name: str, url: str) -> Target:
    """(host, port, TLS context or None, path) of an http:// or https:// url; ValueError naming the key."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{name} {url!r}: wants http://HOST[:PORT]/PATH or https://...")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    return parts.hostname, port, tls, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


async def _exchange(target: Target, body: dict[str, Any]) -> tuple[int, bytes]:
    """POST `body` (JSON) to `target`: (status, answer body)."""
    host, port, tls, path = target
    payload = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection(host, port, ssl=tls)
    try:
        writer.write(
            (
                f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            ).encode()
            + payload
        )
        await writer.drain()
        return await _read_response(reader)
    finally:
        writer.close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of an HTTP/1.x response; NoAnswer when it is not one."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    words = lines[0].split(" ", 2)
    if len(words) < 2 or not words[0].startswith("HTTP/1.") or not words[1].isdigit():
        raise NoAnswer(f"not an HTTP response: {lines[0][:60]!r}")
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip()) if value.strip().isdigit() else -1
    if length is not None and not 0 <= length <= BODY_MAX:
        raise NoAnswer(f"a body of {length} bytes (at most {BODY_MAX} read)")
    body = await (reader.readexactly(length) if length is not None else reader.read(BODY_MAX + 1))
    if len(body) > BODY_MAX:
        raise NoAnswer(f"a body over {BODY_MAX} bytes")
    return int(words[1]), body


def _judge(body: bytes) -> tuple[bool, Any]:
    """(allowed, rules) of a 2xx JSON answer; NoAnswer for anything else."""
    from common.broker.granted import shape

    try:
        answer = json.loads(body)
    except ValueError:
        raise NoAnswer("the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise NoAnswer("the answer is not a JSON object")
    allowed = answer.get("allow", answer.get("ok", answer.get("Ok")))
    if not isinstance(allowed, bool):
        raise NoAnswer('the answer has no "allow": true or false')
    rules = None
    if allowed and answer.get("acl") is not None:
        rules = shape(answer["acl"])
        if isinstance(rules, str):
            raise NoAnswer(f"the answer's acl: {rules}")
    return allowed, rules


def reload_hook(driver: Any, options: dict[str, Any] | None) -> str:
    """SIGHUP: the hook of `options` ([security.http] read again; None: the
    table is gone) in place of the one in force; what changed, in words.
    ValueError (the message) for a url it cannot use: the hook in force stays."""
    broker = driver.broker
    old = broker.hook
    before: HttpAuth | None = getattr(old.ask, "__self__", None) if old is not None else None
    if options is None:
        broker.hook = None
        return "auth hook removed" if old is not None else ""
    fresh = HttpAuth(driver, options)
    kept = before is not None and before.url == fresh.url
    if before is not None and kept:
        fresh.cache = before.cache  # (same service: its answers and the offline grace stay)
        fresh.tasks = before.tasks  # (still in flight: they count toward max_pending)
        fresh.topic_cache, fresh.topic_waiting = before.topic_cache, before.topic_waiting
    hook = fresh.install()
    if old is not None:
        hook.serial, hook.waiting, hook.answers, hook.rules = old.serial, old.waiting, old.answers, old.rules
        hook.holding = old.holding  # (clients held for a topic check asked before: their answer releases them)
    if before is None:
        return f"auth hook {fresh.url} added"
    return f"auth hook {fresh.url} reloaded" + ("" if kept else f" (was {before.url}: its cache dropped)")
