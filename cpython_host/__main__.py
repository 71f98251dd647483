"""The `siskin` command: run the MQTT broker on this host.

`python -m cpython_host --help` (or `siskin --help`) explains every option.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from common.broker import VERSION
from cpython_host.config import LOG_LEVELS, ConfigError, HostConfig, load_config

DESCRIPTION = """\
Siskin: an MQTT 3.1.1 + 5.0 broker for the edge.

Serves MQTT over TCP on --host:--port until SIGINT (Ctrl-C) or SIGTERM, then
shuts down gracefully (stops listening, closes every client, exits 0).
Limits (connections, sessions, queues, packet size, ...) come from the
[limits] table of the --config file; anything not set there keeps the
built-in default. Command-line flags override the file's [server] and [log]
values.
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
            close_linger, shutdown_timeout
  [log]     level = "info"

$SYS: statistics are published as retained messages under $SYS/broker/
every sys_interval seconds ([limits] sys_interval, 0 = off).

other command:
  siskin scram-user NAME                   print a [limits] scram_users line (v5 SCRAM-SHA-256)

exit status: 0 after a clean shutdown, 1 if the port cannot be opened,
2 for a bad command line or config file.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="siskin",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--host",
        metavar="ADDR",
        help="address to listen on (default 127.0.0.1, loopback only; 0.0.0.0 = every IPv4 interface)",
    )
    p.add_argument("--port", metavar="N", type=int, help="TCP port to listen on (default 1883; 0 = any free port)")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config file with [limits], [server] and [log] tables (e.g. boards/linux.toml)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="directory for persistent state (created if missing). NOTE: persistence is not "
        "implemented yet; sessions and retained messages live in memory only and are lost on exit",
    )
    p.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        type=str.lower,
        help="how much to log (default info: connects, disconnects, refusals; debug adds each socket open/close)",
    )
    p.add_argument("--version", action="version", version=f"siskin {VERSION}")
    return p


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def scram_user(argv: Sequence[str]) -> int:
    """`siskin scram-user NAME`: print a [limits] scram_users line for NAME."""
    import getpass

    from common.auth_scram import make_credentials

    p = argparse.ArgumentParser(
        prog="siskin scram-user",
        description="Print the scram_users line (user:salt:iterations:StoredKey:ServerKey) for a v5 "
        "SCRAM-SHA-256 user. The broker keeps no password, only these derived keys. Add the line "
        "to [limits] scram_users in the config file.",
        epilog='example:  siskin scram-user alice  ->  scram_users = ["alice:..."]',
    )
    p.add_argument("name", help="user name (no ':' and no ',')")
    p.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations (default 4096)")
    p.add_argument(
        "--password-stdin", action="store_true", help="read the password from the first line of stdin, not a prompt"
    )
    args = p.parse_args(argv)
    if ":" in args.name or "," in args.name or not args.name:
        p.error("the name must be non-empty and contain no ':' or ','")
    if args.iterations < 1:
        p.error("--iterations must be at least 1")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
    if not password:
        p.error("empty password")
    print(make_credentials(args.name, password, os.urandom(16), args.iterations))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["scram-user"]:
        return scram_user(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        cfg: HostConfig = load_config(args.config)
    except ConfigError as e:
        print(f"siskin: config error: {e}", file=sys.stderr)
        return 2
    overrides: dict[str, Any] = {"host": args.host, "port": args.port, "log_level": args.log_level}
    for name, value in overrides.items():
        if value is not None:
            setattr(cfg, name, value)
    if not 0 <= cfg.port <= 65535:
        print(f"siskin: --port {cfg.port}: wants 0..65535", file=sys.stderr)
        return 2
    from cpython_host.server import make_broker, serve

    try:
        broker = make_broker(cfg)
    except ValueError as e:  # e.g. a malformed scram_users line
        print(f"siskin: config error: {cfg.source}: [limits]: {e}; fix the value.", file=sys.stderr)
        return 2
    setup_logging(cfg.log_level)
    data_dir = None
    if args.data_dir is not None:
        data_dir = os.path.abspath(args.data_dir)
        try:
            os.makedirs(data_dir, exist_ok=True)
        except OSError as e:
            print(f"siskin: --data-dir {args.data_dir}: cannot create it: {e.strerror}", file=sys.stderr)
            return 2
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(serve(cfg, broker, data_dir))


if __name__ == "__main__":
    sys.exit(main())
