"""`siskin ctl`: look at and act on a running broker through its [http] listener's API.

A thin client of cpython_host/web.py's JSON API (urllib, no dependency):
each command is one GET or POST, printed as a table (or as the JSON itself
with --json). The broker's address comes from --url, else from the [http]
table of --config, else the default http://127.0.0.1:9883. When the
listener asks for a login, --user gives the MQTT user name and the password
comes from SISKIN_CTL_PASSWORD, --password-stdin or a prompt.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from cpython_host.config import HTTP, ConfigError, load_config

DEFAULT_PORT = {name: default for name, default, *_ in HTTP}["port"]
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"

EPILOG = f"""\
commands:
  clients                      connected clients: address, protocol, keep-alive, in flight, queued
  sessions                     every session (connected or not) with its queue and subscriptions
  kick CLIENT_ID               disconnect a client (v5: DISCONNECT 0x98 administrative action);
                               a persistent session stays
  drop-session CLIENT_ID       disconnect it and end its session: subscriptions and queue are gone
  retained [FILTER]            retained messages matching FILTER (default "#"; "$SYS/#" for the broker's)
  clear-retained FILTER        clear the retained messages matching FILTER
  store                        the store's size on disk and its syncs
  whoami                       the user you log in as, and whether it is an administrator

Only administrators ([http] admins; anyone on loopback without a login) may
kick, drop-session or clear-retained; another user is refused (403) and
sees only its own clients and sessions and the retained topics its ACL
lets it read.

The broker must run with an [http] table (docs/monitoring.md). Off loopback
it asks for an MQTT user's name and password (HTTP basic auth over HTTPS).

examples:
  siskin ctl clients                              the broker at {DEFAULT_URL}
  siskin ctl --config /etc/siskin/siskin.toml sessions
  SISKIN_CTL_PASSWORD=... siskin ctl --url https://gw:9883 --user admin --cafile ca.pem kick sensor-7
  siskin ctl clear-retained 'sensors/old/#'

exit status: 0 done, 1 the broker refused or could not be reached, 2 bad command line.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="siskin ctl",
        description="Look at and act on a running Siskin broker through its HTTP listener ([http] table).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", help=f"the broker's HTTP listener (default: --config's [http], else {DEFAULT_URL})")
    p.add_argument("--config", metavar="FILE", help="the broker's config file: its [http] table gives the URL")
    p.add_argument("--user", help="MQTT user name for HTTP basic auth (needed off loopback)")
    p.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from stdin's first line (default: SISKIN_CTL_PASSWORD, else a prompt)",
    )
    p.add_argument("--cafile", metavar="FILE", help="CA certificate(s) to verify an HTTPS listener with")
    p.add_argument("--json", action="store_true", help="print the API's JSON answer as it is")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the broker (default 10)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("clients", help="connected clients")
    sub.add_parser("sessions", help="every session with its queue")
    sub.add_parser("kick", help="disconnect a client").add_argument("client_id")
    sub.add_parser("drop-session", help="disconnect a client and end its session").add_argument("client_id")
    sub.add_parser("retained", help="list retained messages").add_argument("filter", nargs="?", default="#")
    sub.add_parser("clear-retained", help="clear retained messages").add_argument("filter")
    sub.add_parser("store", help="the store's size")
    sub.add_parser("whoami", help="the user you log in as, and whether it may act")
    return p


def request(args: argparse.Namespace, url: str, method: str, path: str, body: Any = None) -> Any:
    """The API's JSON answer; SystemExit(1) with the broker's reason if it refused."""
    headers = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if args.user is not None:
        token = base64.b64encode(f"{args.user}:{args.password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    context = ssl.create_default_context(cafile=args.cafile) if url.startswith("https:") else None
    req = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=args.timeout, context=context) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        reason = e.read().decode(errors="replace").strip()
        hint = " (give --user, and the password)" if e.code == 401 and args.user is None else ""
        raise SystemExit(f"siskin ctl: {method} {path}: {e.code} {reason}{hint}") from None
    except (urllib.error.URLError, OSError) as e:
        why = getattr(e, "reason", e)
        raise SystemExit(
            f"siskin ctl: cannot reach {url}: {why} (is the broker running with an [http] table?)"
        ) from None


def table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[str(row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def ctl(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    url = args.url
    if url is None and args.config is not None:
        try:
            http = load_config(args.config).http
        except ConfigError as e:
            print(f"siskin ctl: config error: {e}", file=sys.stderr)
            return 2
        if http is None:
            print(f"siskin ctl: {args.config} has no [http] table: the broker has no HTTP listener", file=sys.stderr)
            return 2
        url = http.url()
    url = (url or DEFAULT_URL).rstrip("/")
    args.password = ""
    if args.user is not None:
        if args.password_stdin:
            args.password = sys.stdin.readline().rstrip("\n")
        else:
            args.password = os.environ.get("SISKIN_CTL_PASSWORD") or getpass.getpass(f"password for {args.user}: ")
    try:
        return run(args, url)
    except SystemExit as e:
        print(e.code, file=sys.stderr)
        return 1


def run(args: argparse.Namespace, url: str) -> int:
    command = args.command
    if command == "clients":
        answer = request(args, url, "GET", "/api/clients")
        text = table(
            answer["clients"],
            ("client_id", "address", "protocol_level", "keep_alive", "user", "inflight", "queued", "queued_bytes"),
        )
    elif command == "sessions":
        answer = request(args, url, "GET", "/api/sessions")
        rows = [{**s, "subscriptions": " ".join(s["subscriptions"])} for s in answer["sessions"]]
        columns = ("client_id", "connected", "persistent", "inflight", "queued", "queued_bytes", "dropped")
        text = table(rows, (*columns, "subscriptions"))
    elif command in ("kick", "drop-session"):
        answer = request(args, url, "POST", f"/api/{command}", {"client_id": args.client_id})
        text = f"{answer['client_id']}: {answer['result']}"
    elif command == "retained":
        answer = request(args, url, "GET", "/api/retained?" + urllib.parse.urlencode({"filter": args.filter}))
        text = table(answer["retained"], ("topic", "bytes", "qos"))
    elif command == "clear-retained":
        answer = request(args, url, "POST", "/api/clear-retained", {"filter": args.filter})
        text = f"{answer['cleared']} retained message(s) matching {answer['filter']} cleared"
    elif command == "whoami":
        answer = request(args, url, "GET", "/api/status")
        answer = {"user": answer["user"], "admin": answer["admin"]}
        if answer["user"] is None:
            text = "no login asked (loopback): administrator"
        elif answer["admin"]:
            text = f"{answer['user']}: administrator ([http] admins)"
        else:
            text = f"{answer['user']}: not an administrator: sees its own clients and sessions and the retained topics its ACL reads; may not act"
    else:  # store
        answer = request(args, url, "GET", "/api/store")
        if not answer["enabled"]:
            text = "no store: the broker runs without --data-dir"
        else:
            text = f"{answer['path']}: {answer['size_bytes']} bytes, {answer['syncs']} syncs (store_sync = {answer['store_sync']})"
    print(json.dumps(answer, indent=1, sort_keys=True) if args.json else text)
    return 0
