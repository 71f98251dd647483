"""The host's logging boundary: every argument of a log record is data.

Theory of operation: one logging.Filter on the handlers of the root logger
(install(), at start-up) rewrites each record before it is formatted. Its
arguments (record.args) are made text and then printable (control
characters, ESC, DEL, C1, U+2028/9 and the backslash written as escapes:
common/broker/clienttext.py, the core's own boundary) and cut at
LOG_ARG_MAX characters, whatever the call site; so neither today's log
lines nor a new one can hand the terminal a client's escape sequence, forge
a line, or write a megabyte. A record without arguments (text formatted
before the call: the core's lines, which its own boundary escaped and cut)
has its control characters escaped; its backslashes are left as they are,
so the core's escapes are not escaped twice.

Client text the host composes into its own words (a WebSocket refusal's
path or subprotocols, an HTTP login's user name) is cut at the core's
CLIENT_TEXT_MAX (128) where it is composed (clip); LOG_ARG_MAX is the
backstop for any argument, long enough for our own texts (a config error
names its file, line and fix).
"""

from __future__ import annotations

import logging

from common.broker.clienttext import clip, printable

LOG_ARG_MAX = 1024


def _data(arg: object) -> object:
    if isinstance(arg, (bool, int, float)) or arg is None:
        return arg
    text = arg.decode("latin-1") if isinstance(arg, (bytes, bytearray)) else str(arg)
    return printable(clip(text, LOG_ARG_MAX))


class ClientTextFilter(logging.Filter):
    """Escape and bound every argument of a record (once, whichever handler sees it first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "siskin_escaped", False):
            return True
        record.siskin_escaped = True
        args = record.args
        if args:
            if isinstance(args, dict):
                record.args = {k: _data(v) for k, v in args.items()}
            else:
                record.args = tuple(_data(a) for a in args)
        elif isinstance(record.msg, str):
            record.msg = printable(record.msg, backslash=False)
        return True


def install() -> None:
    """Put the filter on every handler of the root logger (after logging.basicConfig)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, ClientTextFilter) for f in handler.filters):
            handler.addFilter(ClientTextFilter())
