"""`siskin [OPTIONS]` (or `siskin serve [OPTIONS]`): run the MQTT broker on this host.

Parses the command line and the config file, opens the store, restores it
and hands everything to cpython_host/server.py until a signal stops it.
`siskin --help` explains every option.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common import VERSION
from common.broker.settings import LOG_LEVEL_NAMES
from cpython_host import logtext
from cpython_host.auth.jwt_keys import load_jwt
from cpython_host.cli import summary
from cpython_host.compat import run
from cpython_host.config import ConfigError, HostConfig, load_config, load_security
from cpython_host.hints import cannot_write
from cpython_host.runtime.pypy_heap import NURSERY_VARIABLE, nursery_bytes

DESCRIPTION = """\
Siskin: an MQTT 3.1.1 + 5.0 broker for the edge.

Serves MQTT over TCP on --host:--port (and over TLS and WebSockets on the
--config file's listeners) until SIGINT (Ctrl-C) or SIGTERM, then shuts down gracefully
(stops listening, closes every client, exits 0). SIGHUP reloads the TLS
certificates and keys, the [security] users and rules, and the [log] level
(one log line says what), without dropping a client. Limits (connections,
sessions, queues, packet size, ...) come from the [limits] table of the
--config file; anything not set there keeps the built-in default.
Command-line flags override the file's [server], [[listener]] and [log] values.
"""

EPILOG = """\
examples:
  siskin                                   127.0.0.1:1883, built-in limits
  siskin --config boards/linux.toml        a Linux gateway's limits
  siskin --host 0.0.0.0 --port 1883 --config boards/rpi.toml --log-level debug
  python -m cpython_host --port 0          any free port (the log says which)

config file (TOML; boards/linux.toml is a commented example of every key):
  [limits]  max_connections = 10000        broker settings, by name
  [server]  host, port, backlog, write_buffer_high, write_buffer_low,
            close_linger, shutdown_timeout, data_dir (as --data-dir)
  [[listener]]  one table per socket, instead of [server] host and port:
            host, port; TLS: certfile, keyfile, cafile, require_certificate
            (mutual TLS), use_identity_as_username, identity = "cn" |
            "san_dns" | "san_email" | "san_uri", tls_version = "tlsv1.2" |
            "tlsv1.3" (the oldest accepted); protocol = "websockets" (MQTT
            over WebSockets, ws:// or wss:// with TLS): path = "/mqtt" ("" =
            any path), origins = [...] (browser pages allowed; [] = any);
            protocol = "mqtt-sn" (MQTT-SN v1.2 over UDP, docs/mqtt-sn.md:
            gw_id, max_clients, max_topic_ids, predefined, max_buffered,
            max_packet_size, session_expiry, retry_interval,
            max_retries, advertise_interval, advertise_to; loopback only unless
            allow_remote = true). Per listener: mount_point,
            [listener.security], and its own rate limits rate_messages,
            rate_bytes, rate_subscribes, listener_rate_messages,
            listener_rate_bytes, listener_rate_subscribes, rate_connects
            ([limits]' where not set; 0 = off on it; docs/limits.md).
            --host/--port set the first one.
  [log]     level = "info"
  [security] password_file, acl_file, acl, allow_anonymous
  [http]    host, port, certfile, keyfile, auth = "auto" | "basic", sample_interval
  [[bridge]]  one table per upstream broker (Mosquitto, a NATS cluster, AWS
            IoT, Azure IoT Hub, ...): name, addresses, client_id, credentials,
            TLS, protocol, profile "mqtt" | "nats" | "aws" | "azure" | "hosted",
            with [[bridge.topic]] rules: direction "out" | "in" | "both",
            local + remote ("sensors/+/t" -> "site1/{{1}}/t") or pattern with
            local_prefix + remote_prefix, qos, retain. Outbound messages wait
            on disk while the upstream is away, never slowing a publisher
            (docs/bridge.md); state in $SYS/broker/bridge/<name>/ and
            `siskin ctl bridge list`; SIGHUP reloads the tables.

TLS (docs/security.md): plain MQTT on loopback and TLS for the network, e.g.
  [[listener]]
  port = 1883
  [[listener]]
  host = "0.0.0.0"
  port = 8883
  certfile = "/etc/siskin/server.crt"
  keyfile = "/etc/siskin/server.key"
A TLS handshake must end within [limits] connect_timeout, which also covers
the CONNECT that follows. kill -HUP PID reloads certfile, keyfile, cafile.

WebSockets (docs/host.md): browsers and MQTT.js reach ws://HOST:9001/mqtt with
  [[listener]]
  protocol = "websockets"
  host = "0.0.0.0"
  port = 9001
The HTTP upgrade counts against connect_timeout too.

$SYS: statistics are published as retained messages under $SYS/broker/
every sys_interval seconds ([limits] sys_interval, 0 = off).

persistence: with --data-dir, sessions, subscriptions, queued messages and
retained messages are kept in DIR/siskin.log and come back after a restart or
a crash (kill -9, power loss). [limits] store_sync = "always" (default) makes
every acknowledged QoS 1/2 message durable before its ack; "batch" syncs every
store_sync_ms. Encryption at rest (AES-GCM): --store-key-file FILE or the
environment variable SISKIN_STORE_KEY (64 hex digits; docs/persistence.md).

security ([security] table; docs/security.md): password_file (users),
acl_file or acl (access control, deny by default once set), allow_anonymous.
Not set: anonymous clients are served on a loopback-only listener, refused
on any other. SIGHUP re-reads [security] and its files; a bad file keeps the
rules in force (logged).

from Mosquitto (docs/install.md lists what is converted and what is refused):
  siskin --mosquitto-conf /etc/mosquitto/mosquitto.conf      run with it as it is
  siskin convert-mosquitto-conf /etc/mosquitto/mosquitto.conf -o /etc/siskin/siskin.toml

run as a service: contrib/systemd/siskin.service (Type=notify: READY=1 once
every listener accepts); docs/install.md (Raspberry Pi, pipx, journalctl).

other commands (siskin NAME --help explains each):
{commands}

monitoring ([http] table; docs/monitoring.md): Prometheus /metrics, a live
status page at / and the API `siskin ctl` uses, on their own port (9883),
loopback only unless [security] users log in over HTTPS.

exit status: 0 after a clean shutdown, 1 if a port cannot be opened,
2 for a bad command line, config file, certificate, key or store.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="siskin",
        description=DESCRIPTION,
        epilog=EPILOG.format(commands=summary()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--host",
        metavar="ADDR",
        help="address to listen on (default 127.0.0.1, loopback only; 0.0.0.0 = every IPv4 interface); "
        "with [[listener]] tables, the first one's",
    )
    p.add_argument(
        "--port",
        metavar="N",
        type=int,
        help="TCP port to listen on (default 1883; 0 = any free port); with [[listener]] tables, the first one's",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config file with [limits], [server], [[listener]], [log], [security], [http] "
        "(status page, /metrics, siskin ctl) and [[bridge]] (upstream brokers) tables; "
        "boards/linux.toml explains each key",
    )
    p.add_argument(
        "--mosquitto-conf",
        metavar="FILE",
        help="read a Mosquitto configuration (mosquitto.conf) instead of --config: listeners, TLS, "
        "users, ACL, persistence and limits are converted (siskin convert-mosquitto-conf shows the "
        "result); an option Siskin cannot honour stops the start, naming its line",
    )
    p.add_argument(
        "--ignore-unsupported",
        action="store_true",
        help="with --mosquitto-conf: leave out the options Siskin cannot honour (each is logged) instead of stopping",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="directory for persistent state (created if missing): sessions, subscriptions, queued "
        "and retained messages survive restarts and crashes. Without it, everything is in memory only",
    )
    p.add_argument(
        "--store-key-file",
        metavar="FILE",
        help="encrypt the store with the AES key in FILE (64 hex digits; `siskin store-key` makes one). "
        "Default: the environment variable SISKIN_STORE_KEY, else no encryption",
    )
    p.add_argument(
        "--wipe-store",
        action="store_true",
        help="discard everything in the data directory's store before starting (sessions, queues, "
        "retained messages): for a store that is damaged, from a newer Siskin, or under a lost key",
    )
    p.add_argument(
        "--log-level",
        choices=LOG_LEVEL_NAMES,
        type=str.lower,
        help="how much to log (default info: connects, disconnects, refusals; debug adds each socket open/close)",
    )
    p.add_argument(
        "--event-loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="auto (default): uvloop when it is installed (about 1.3 x the connection rate of asyncio's "
        "own loop, docs/benchmarks.md), else asyncio's (always on PyPy, where uvloop does not run); "
        "uvloop: fail if it is missing",
    )
    p.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    return p


class _Version(argparse.Action):
    """--version, looked up only when asked: importlib.metadata brings csv,
    zipfile, email and configparser with it (about 2 MB of a PyPy broker's
    resident memory for a string nobody asked for)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"siskin {version()}")
        parser.exit()


def version() -> str:
    """The installed package's version; the core's VERSION when run from the source tree."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("siskin")
    except PackageNotFoundError:
        return VERSION


def mosquitto_reader(ignore_unsupported: bool) -> Callable[[str], dict[str, Any]]:
    """load_config's reader for --mosquitto-conf: the converted tables; the notes go to stderr."""
    from cpython_host.mosquitto.conf import convert

    def read(path: str) -> dict[str, Any]:
        conv = convert(path, ignore_unsupported)
        for note in conv.notes:
            print(f"siskin: {note}", file=sys.stderr)
        return conv.doc

    return read


def _store_log(level: int, text: str) -> None:
    logging.getLogger("siskin.store").log(level, "%s", text)


def _bridge_log(level: int, text: str) -> None:
    logging.getLogger("siskin.bridge").log(level, "%s", text)


def setup_logging(level: str, syslog: str = "") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if syslog:
        logtext.to_syslog(syslog)
    logtext.install()  # every argument of every line is escaped and bounded


def _loop_factory(choice: str) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, bool]:
    """(the loop's factory, whether it is uvloop's); ImportError if uvloop is demanded but missing.

    asyncio's own loop, where there is epoll, shares its epoll with the plain
    listeners' hub (cpython_host/transports/epoll_hub.py); None: asyncio's default.
    """
    from cpython_host.transports import epoll_hub, shared_selector

    own = shared_selector.new_event_loop if epoll_hub.AVAILABLE else None
    if choice == "asyncio":
        return own, False
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise
        return own, False
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory, True


def _no_uvloop() -> str:
    """Why there is no uvloop, and what to do about it."""
    if sys.implementation.name == "pypy":  # its C extension API is CPython's; PyPy's JIT is the speed-up there
        return "uvloop does not run on PyPy"
    return "uvloop is not installed (pip install uvloop: about 1.3 x the connection rate)"


def _key_text(args: argparse.Namespace) -> str | None:
    if args.store_key_file is not None:
        with open(args.store_key_file) as f:
            return f.read()
    return os.environ.get("SISKIN_STORE_KEY") or None


# Mosquitto's own options, which its users type out of habit: what Siskin calls them.
MOSQUITTO_OPTIONS = {
    "-c": "a mosquitto.conf is read as it is with --mosquitto-conf FILE (Siskin's own TOML: --config FILE)",
    "--config-file": "a mosquitto.conf is read as it is with --mosquitto-conf FILE (Siskin's own TOML: --config FILE)",
    "-p": "the port is --port N",
    "-v": "more logging is --log-level debug",
    "--verbose": "more logging is --log-level debug",
    "-d": "Siskin does not fork into the background: run it as a service (contrib/systemd/siskin.service)",
    "--daemon": "Siskin does not fork into the background: run it as a service (contrib/systemd/siskin.service)",
}


def mosquitto_habit(argv: Sequence[str]) -> str | None:
    """The hint for a Mosquitto option on the command line, or None."""
    for arg in argv:
        if arg == "--":
            break
        hint = MOSQUITTO_OPTIONS.get(arg.split("=", 1)[0])
        if hint is not None:
            return f"siskin: {arg} is Mosquitto's option: {hint} (siskin --help lists Siskin's)"
    return None


def main(argv: Sequence[str]) -> int:
    habit = mosquitto_habit(argv)
    if habit is not None:
        print(habit, file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.mosquitto_conf is not None and args.config is not None:
        parser.error("--config and --mosquitto-conf: give one of them")
    if args.ignore_unsupported and args.mosquitto_conf is None:
        parser.error("--ignore-unsupported goes with --mosquitto-conf")
    try:
        if args.mosquitto_conf is not None:
            cfg: HostConfig = load_config(args.mosquitto_conf, mosquitto_reader(args.ignore_unsupported))
        else:
            cfg = load_config(args.config)
        security = load_security(cfg)
        jwt = load_jwt(cfg)
    except ConfigError as e:
        print(f"siskin: config error: {e}", file=sys.stderr)
        return 2
    if args.port is not None and not 0 <= args.port <= 65535:
        print(f"siskin: --port {args.port}: wants 0..65535", file=sys.stderr)
        return 2
    cfg.set_address(args.host, args.port)
    if args.log_level is not None:
        cfg.log_level = cfg.log_level_flag = args.log_level
    try:
        factory, uvloop_on = _loop_factory(args.event_loop)
    except ImportError:
        print(f"siskin: --event-loop uvloop: {_no_uvloop()}; or use --event-loop asyncio", file=sys.stderr)
        return 2
    from common import startup
    from common.store.store import StoreError
    from cpython_host.operations.store_monitor import StoreMonitor
    from cpython_host.runtime.run import host_clock, make_driver, serve, wall_ms
    from cpython_host.runtime.storage import LOG_NAME, give_back_heap, open_store
    from cpython_host.transports.listeners import tls_contexts

    try:
        contexts = tls_contexts(cfg)
    except ConfigError as e:
        print(f"siskin: config error: {e}", file=sys.stderr)
        return 2
    try:
        setup_logging(cfg.log_level, cfg.syslog)
    except OSError as e:
        print(f"siskin: config error: [log] syslog = {cfg.syslog!r}: {e}", file=sys.stderr)
        return 2
    if not uvloop_on and args.event_loop == "auto":
        logging.getLogger("siskin.host").info("event loop: asyncio's own: %s", _no_uvloop())
    nursery = nursery_bytes()
    if nursery is not None:
        logging.getLogger("siskin.host").info(
            "PyPy GC nursery: %d KB (%s=%s; cpython_host/runtime/pypy_heap.py)",
            nursery >> 10,
            NURSERY_VARIABLE,
            os.environ.get(NURSERY_VARIABLE, "unset"),
        )
    store = None
    data_dir = None
    if args.data_dir is None and cfg.data_dir:
        # The file's data_dir; a relative one from the file's directory, like its other file names.
        base = cfg.path.parent if cfg.path is not None else Path(".")
        args.data_dir = str(base / cfg.data_dir)
    if args.data_dir is not None:
        data_dir = os.path.abspath(args.data_dir)
        try:
            monitor = StoreMonitor(os.path.join(data_dir, LOG_NAME))
            store = open_store(data_dir, _key_text(args), args.wipe_store, _store_log, monitor)
        except StoreError as e:
            print(f"siskin: store in {data_dir}: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            hint = cannot_write(e, data_dir)
            print(
                f"siskin: store in {data_dir}: {e.strerror or e} ({e.filename or data_dir}){'; ' + hint if hint else ''}",
                file=sys.stderr,
            )
            return 2
    elif args.wipe_store or args.store_key_file:
        print("siskin: --wipe-store and --store-key-file need --data-dir", file=sys.stderr)
        return 2
    try:
        driver = startup.assemble(cfg.settings, os.urandom, store, *host_clock(cfg))
    except ValueError as e:  # e.g. a malformed scram_users line
        print(f"siskin: config error: {cfg.source}: [limits]: {e}; fix the value.", file=sys.stderr)
        return 2
    driver.broker.jwt = jwt
    if "http" in cfg.security:
        from cpython_host.auth.http_hook import HttpAuth

        HttpAuth(driver, cfg.security["http"]).install()
    driver.broker.wall_ms = wall_ms  # Sparkplug timestamps (docs/sparkplug.md)
    driver.set_security(*security)
    if cfg.warm_up:
        from cpython_host.runtime.warmup import warm_up

        store_in = (data_dir, bool(store.keys)) if store is not None and data_dir is not None else None
        warmed = warm_up(cfg.settings, lambda b: make_driver(cfg, b), security, store_in=store_in)
        if warmed is not None:
            # What its garbage took from glibc goes back (PyPy: 8 MB of the
            # broker's RSS at start, docs/benchmarks.md).
            give_back_heap()
            logging.getLogger("siskin.host").info(
                "JIT warmed up: %d in-memory connections through the core in %.2f s, "
                "%d releases of clients held back for their rate limits ([server] warm_up)",
                *warmed,
            )
    if store is not None:
        startup.restore(driver, int(time.time()), [b.name for b in cfg.bridges], _bridge_log)
        give_back_heap()
        monitor.starting = False  # serving from here: READY=1 and the listeners' STATUS=
    try:
        return run(serve(cfg, driver, data_dir, contexts, security), factory)
    finally:
        if store is not None:
            store.close()
