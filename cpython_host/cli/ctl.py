"""`siskin ctl`: look at and act on a running broker through its [http] listener's API.

A thin client of cpython_host/operations/http_server.py's JSON API (urllib, no dependency):
each command is one GET or POST, printed as a table for people (or as the
JSON itself with --json). The broker's address comes from --url, else from
the [http] table of --config, else the default http://127.0.0.1:9883. When
the listener asks for a login, --user gives the MQTT user name and the
password comes from SISKIN_CTL_PASSWORD, --password-stdin or a prompt.

The connection options may stand before or after the command
(`siskin ctl --json clients` = `siskin ctl clients --json`). A command is
a row of COMMANDS: its name, help, arguments and the function that asks
the API and says what came back; `command_parser` gives a command (or a
command's own subcommand) the connection options too.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import http.client
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from cpython_host.config import HTTP, ConfigError, load_config

DEFAULT_PORT = {name: default for name, default, *_ in HTTP}["port"]
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"

EPILOG = f"""\
commands:
  clients                      connected clients: address, MQTT version, keep-alive, user, in flight, queued
  sessions                     every session (connected or not) with its queue and subscriptions
  kick CLIENT_ID               disconnect a client (v5: DISCONNECT 0x98 administrative action);
                               a persistent session stays
  drop-session CLIENT_ID       disconnect it and end its session: subscriptions and queue are gone
  retained [FILTER]            retained messages matching FILTER (default "#"; "$SYS/#" for the broker's)
  clear-retained FILTER        clear the retained messages matching FILTER
  store                        the store's size on disk and its syncs
  bridge list                  every bridge: state, address, queue, oldest message, in flight,
                               send rate, time since the last ack, counters
  bridge add FILE [NAME]       start the [[bridge]] of a TOML file (NAME: which one, if it has
                               several); not written to the config file (SIGHUP reloads that)
  bridge remove NAME           stop it and end its session: its queue is dead-lettered (counted)
  bridge pause NAME            no upstream connection until resume; messages queue meanwhile
  bridge resume NAME
  whoami                       the user you log in as, and whether it is an administrator

Only administrators ([http] admins; anyone on loopback without a login) may
kick, drop-session, clear-retained or act on a bridge; another user is refused (403) and
sees only its own clients and sessions and the retained topics its ACL
lets it read.

The broker must run with an [http] table (docs/monitoring.md). Off loopback
it asks for an MQTT user's name and password (HTTP basic auth over HTTPS).
The options above may also follow the command.

examples:
  siskin ctl clients                              the broker at {DEFAULT_URL}
  siskin ctl sessions --config /etc/siskin/siskin.toml
  SISKIN_CTL_PASSWORD=... siskin ctl kick sensor-7 --url https://gw:9883 --user admin --cafile ca.pem
  siskin ctl clear-retained 'sensors/old/#'
  siskin ctl bridge add /etc/siskin/siskin.toml cloud
  siskin ctl clients --json                       the API's answer as it is

exit status: 0 done, 1 the broker refused or could not be reached, 2 bad command line.
"""


def add_connection_options(p: argparse.ArgumentParser, after_command: bool) -> None:
    """The options every command takes; after the command they only override (SUPPRESS keeps
    a subparser's defaults from overwriting what was given before the command)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if after_command else value

    p.add_argument(
        "--url",
        default=default(None),
        help=f"the broker's HTTP listener (default: --config's [http], else {DEFAULT_URL})",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        default=default(None),
        help="the broker's config file: its [http] table gives the URL",
    )
    p.add_argument("--user", default=default(None), help="MQTT user name for HTTP basic auth (needed off loopback)")
    p.add_argument(
        "--password-stdin",
        action="store_true",
        default=default(False),
        help="read the password from stdin's first line (default: SISKIN_CTL_PASSWORD, else a prompt)",
    )
    p.add_argument(
        "--cafile", metavar="FILE", default=default(None), help="CA certificate(s) to verify an HTTPS listener with"
    )
    p.add_argument("--json", action="store_true", default=default(False), help="print the API's JSON answer as it is")
    p.add_argument("--timeout", type=float, default=default(10.0), help="seconds to wait for the broker (default 10)")


class Api:
    """The broker's JSON API at one URL, with the login if there is one."""

    def __init__(self, url: str, args: argparse.Namespace, password: str) -> None:
        self.url = url
        self.user: str | None = args.user
        self.password = password
        self.timeout: float = args.timeout
        self.context = ssl.create_default_context(cafile=args.cafile) if url.startswith("https:") else None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.call("POST", path, body)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The API's JSON answer; SystemExit with the broker's reason if it refused."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.user is not None:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.context) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            reason = e.read().decode(errors="replace").strip()
            hint = " (give --user, and the password)" if e.code == 401 and self.user is None else ""
            raise SystemExit(f"siskin ctl: {method} {path}: {e.code} {reason}{hint}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            why = getattr(e, "reason", e)
            raise SystemExit(f"siskin ctl: cannot reach {self.url}: {why}{unreachable_hint(self.url, why)}") from None


def unreachable_hint(url: str, why: Any) -> str:
    """What to do about a request to `url` that failed with `why` (after its text)."""
    if isinstance(why, ssl.SSLCertVerificationError):
        return (
            f" ({why.verify_message}: give --cafile with the CA that signed the broker's certificate; for "
            "one siskin cert made, its own .crt file)"
        )
    if isinstance(why, ssl.SSLError) and url.startswith("https:"):
        return f" (the listener does not speak TLS? try --url {'http:' + url[6:]})"
    if isinstance(why, (http.client.HTTPException, ConnectionResetError)) and url.startswith("http:"):
        return f" (the listener speaks HTTPS? try --url {'https:' + url[5:]})"
    if isinstance(why, ConnectionRefusedError):
        return " (nothing listens there: is the broker running, with an [http] table?)"
    return ""


# ---------------------------------------------------------------- for people

MQTT_VERSIONS = {3: "3.1", 4: "3.1.1", 5: "5.0"}

Column = tuple[str, Callable[[dict[str, Any]], str]]


def shown(value: Any) -> str:
    """A JSON value as a person reads it: yes/no, "-" for nothing."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def field(name: str) -> Callable[[dict[str, Any]], str]:
    return lambda row: shown(row[name])


def table(rows: list[dict[str, Any]], columns: Sequence[Column]) -> str:
    cells = [[cell(row) for _, cell in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, (h, _) in enumerate(columns)]
    lines = ["  ".join(h.ljust(w) for (h, _), w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def size(n: int) -> str:
    """12,345 bytes (12.1 KiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n:,} bytes ({n / scale:.1f} {unit})"
    return f"{n:,} bytes"


CLIENT_COLUMNS: tuple[Column, ...] = (
    ("client id", field("client_id")),
    ("address", field("address")),
    ("MQTT", lambda r: MQTT_VERSIONS.get(r["protocol_level"], str(r["protocol_level"]))),
    ("keep-alive", lambda r: f"{r['keep_alive']} s" if r["keep_alive"] else "off"),
    ("user", field("user")),
    ("in flight", field("inflight")),
    ("queued", field("queued")),
    ("queued bytes", field("queued_bytes")),
)

SESSION_COLUMNS: tuple[Column, ...] = (
    ("client id", field("client_id")),
    ("connected", field("connected")),
    ("persistent", field("persistent")),
    ("in flight", field("inflight")),
    ("queued", field("queued")),
    ("queued bytes", field("queued_bytes")),
    ("dropped", field("dropped")),
    ("subscriptions", lambda r: " ".join(r["subscriptions"]) or "-"),
)


# ---------------------------------------------------------------- the commands


def clients(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.get("/api/clients")
    rows = answer["clients"]
    return answer, table(rows, CLIENT_COLUMNS) if rows else "no client connected"


def sessions(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.get("/api/sessions")
    rows = answer["sessions"]
    return answer, table(rows, SESSION_COLUMNS) if rows else "no session"


def kick(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.post("/api/kick", {"client_id": args.client_id})
    return answer, f"{answer['client_id']}: {answer['result']}"


def drop_session(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.post("/api/drop-session", {"client_id": args.client_id})
    return answer, f"{answer['client_id']}: {answer['result']}"


def retained(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.get("/api/retained?" + urllib.parse.urlencode({"filter": args.filter}))
    rows = answer["retained"]
    if not rows:
        return answer, f"no retained message matches {args.filter}"
    return answer, table(rows, (("topic", field("topic")), ("bytes", field("bytes")), ("QoS", field("qos"))))


def clear_retained(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.post("/api/clear-retained", {"filter": args.filter})
    return answer, f"{answer['cleared']} retained message(s) matching {answer['filter']} cleared"


def store(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    answer = api.get("/api/store")
    if not answer["enabled"]:
        return answer, "no store: the broker runs without --data-dir"
    return answer, (
        f"{answer['path']}: {size(answer['size_bytes'])}, {answer['syncs']:,} syncs (store_sync = {answer['store_sync']})"
    )


def whoami(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    status = api.get("/api/status")
    answer = {"user": status["user"], "admin": status["admin"]}
    if answer["user"] is None:
        return answer, "no login asked (loopback): administrator"
    if answer["admin"]:
        return answer, f"{answer['user']}: administrator ([http] admins)"
    return answer, (
        f"{answer['user']}: not an administrator: sees its own clients and sessions and the retained "
        "topics its ACL reads; may not act"
    )


def bridge_field(name: str) -> Callable[[dict[str, Any]], str]:
    """A bridge's figure; -1 (never, none yet) shown as "-"."""
    return lambda row: "-" if row[name] == -1 else shown(row[name])


BRIDGE_COLUMNS: tuple[Column, ...] = tuple(
    (name.replace("_", " "), bridge_field(name))
    for name in (
        "name", "state", "address", "queued", "oldest_queued_age", "inflight", "inflight_max", "send_rate",
        "last_ack_age", "sent", "dead_lettered", "retried", "faults", "last_error",
    )
)  # fmt: skip


def bridge(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    """`siskin ctl bridge list|add|remove|pause|resume`."""
    action = args.bridge_command
    if action == "list":
        answer = api.get("/api/bridges")
        rows = answer["bridges"]
        return answer, table(rows, BRIDGE_COLUMNS) if rows else "no bridges"
    if action == "add":
        answer = api.post("/api/bridge/add", {"bridge": bridge_table(args.file, args.name)})
        return answer, f"bridge {answer['name']}: {answer['result']}"
    answer = api.post(f"/api/bridge/{action}", {"name": args.name})
    text = f"bridge {answer['name']}: {answer['result']}"
    if action == "remove":
        text += f", {answer['dead_lettered']} queued message(s) dead-lettered"
    return answer, text


def bridge_table(path: str, name: str | None) -> dict[str, Any]:
    """The [[bridge]] table `name` of TOML file `path` (the only one if no name); SystemExit otherwise."""
    from cpython_host.compat import tomllib

    try:
        with open(path, "rb") as f:
            tables = tomllib.load(f).get("bridge", [])
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SystemExit(f"siskin ctl: {path}: {e}") from None
    if not isinstance(tables, list) or not tables:
        raise SystemExit(f"siskin ctl: {path} has no [[bridge]] table")
    if name is None:
        if len(tables) > 1:
            names = ", ".join(str(t.get("name")) for t in tables if isinstance(t, dict))
            raise SystemExit(f"siskin ctl: {path} has {len(tables)} bridges ({names}): name the one to add")
        return dict(tables[0])
    for t in tables:
        if isinstance(t, dict) and t.get("name") == name:
            return dict(t)
    raise SystemExit(f"siskin ctl: {path} has no [[bridge]] named {name!r}")


def bridge_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="bridge_command", required=True, metavar="ACTION")
    command_parser(actions, "list", "every bridge and its health")
    add = command_parser(actions, "add", "start the [[bridge]] of a TOML file")
    add.add_argument("file", help="a TOML file with [[bridge]] tables (the broker's config file will do)")
    add.add_argument("name", nargs="?", help="which bridge of the file (needed if it has several)")
    for action in ("remove", "pause", "resume"):
        command_parser(actions, action, f"{action} a bridge").add_argument("name")


def client_id_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("client_id", metavar="CLIENT_ID")


def no_arguments(p: argparse.ArgumentParser) -> None:
    pass


Run = Callable[[Api, argparse.Namespace], tuple[Any, str]]

# (name, help, add its arguments, run it)
COMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], object], Run], ...] = (
    ("clients", "connected clients", no_arguments, clients),
    ("sessions", "every session with its queue", no_arguments, sessions),
    ("kick", "disconnect a client", client_id_argument, kick),
    ("drop-session", "disconnect a client and end its session", client_id_argument, drop_session),
    (
        "retained",
        "list retained messages",
        lambda p: p.add_argument("filter", metavar="FILTER", nargs="?", default="#"),
        retained,
    ),
    ("clear-retained", "clear retained messages", lambda p: p.add_argument("filter", metavar="FILTER"), clear_retained),
    ("store", "the store's size", no_arguments, store),
    ("bridge", "list, add, remove, pause or resume bridges", bridge_arguments, bridge),
    ("whoami", "the user you log in as, and whether it may act", no_arguments, whoami),
)


def command_parser(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A (sub)command's parser that takes the connection options after its name too."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
    add_connection_options(p, after_command=True)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="siskin ctl",
        description="Look at and act on a running Siskin broker through its HTTP listener ([http] table).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_options(p, after_command=False)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, what, arguments, run in COMMANDS:
        arguments(command_parser(sub, name, what))
        sub.choices[name].set_defaults(run=run)
    return p


def broker_url(args: argparse.Namespace) -> str:
    """--url, else --config's [http] listener, else the default; SystemExit(2) for a config without one."""
    url: str | None = args.url
    if url is None and args.config is not None:
        try:
            http = load_config(args.config).http
        except ConfigError as e:
            raise SystemExit(f"siskin ctl: config error: {e}") from None
        if http is None:
            raise SystemExit(f"siskin ctl: {args.config} has no [http] table: the broker has no HTTP listener")
        url = http.url()
    return (url or DEFAULT_URL).rstrip("/")


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        url = broker_url(args)
    except SystemExit as e:
        print(e.code, file=sys.stderr)
        return 2
    password = ""
    if args.user is not None:
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = os.environ.get("SISKIN_CTL_PASSWORD") or ""
            if not password and not sys.stdin.isatty():
                print(
                    f"siskin ctl: --user {args.user} needs a password and stdin is not a terminal to ask on: "
                    "set SISKIN_CTL_PASSWORD, or give it on stdin's first line with --password-stdin",
                    file=sys.stderr,
                )
                return 2
            if not password:
                try:
                    password = getpass.getpass(f"password for {args.user}: ")
                except (EOFError, KeyboardInterrupt):
                    print("\nsiskin ctl: no password given", file=sys.stderr)
                    return 2
    try:
        answer, text = args.run(Api(url, args, password), args)
    except SystemExit as e:
        print(e.code, file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=1, sort_keys=True) if args.json else text)
    return 0
