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

import collections
import logging
import os
import stat
import sys

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


# Python's levels -> syslog priorities, as the journal reads a "<N>" line prefix.
PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
DEBUG_PRIORITY = 7


def under_journal(fd: int = 2) -> bool:
    """Whether `fd` is the stream systemd gave to the journal ($JOURNAL_STREAM names its
    device and inode): then each line's priority goes in front of it, as "<N>"."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


class JournalFormatter(logging.Formatter):
    """Each line as "<N>LOGGER: text" (N: the syslog priority; `journalctl -p warning`
    picks by it), every line of a multi-line record (a traceback) with the same N.
    No time stamp: the journal keeps its own."""

    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        n = next((p for level, p in PRIORITIES if record.levelno >= level), DEBUG_PRIORITY)
        return "\n".join(f"<{n}>{line}" for line in super().format(record).split("\n"))


def to_syslog(address: str) -> None:
    """Log to the syslog socket `address` ("/dev/log") as well, as Mosquitto's log_dest
    syslog: facility daemon, "siskin[PID]: LOGGER: text", the priority of each level
    (SysLogHandler maps them as PRIORITIES does). OSError when `address` is no socket (a
    typo); a daemon that is away is tried again at each line, as syslog(3) does."""
    if not stat.S_ISSOCK(os.stat(address).st_mode):
        raise OSError(f"{address} is not a socket")
    import logging.handlers  # (only for syslog: it brings pickle and socketserver)

    handler = logging.handlers.SysLogHandler(address=address, facility=logging.handlers.SysLogHandler.LOG_DAEMON)
    handler.setFormatter(logging.Formatter(f"siskin[{os.getpid()}]: %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)


RECENT_WARNINGS = 20


class RecentWarnings(logging.Handler):
    """The last RECENT_WARNINGS records at warning level or above, as (time, level, logger,
    text): the status page's "recent warnings" (cpython_host/status.py)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: collections.deque[tuple[float, str, str, str]] = collections.deque(maxlen=RECENT_WARNINGS)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage().split("\n", 1)[0]  # (a traceback's first line)
        except Exception:  # (a record that does not format is the stderr handler's to report)
            return
        self.records.append((record.created, record.levelname.lower(), record.name, text))


recent = RecentWarnings()


def install() -> None:
    """Put the filter on every handler of the root logger (after logging.basicConfig);
    on the journal's stream, the priority prefixes (JournalFormatter); and the ring of
    recent warnings (`recent`)."""
    journal = under_journal()
    root = logging.getLogger()
    if recent not in root.handlers:
        root.addHandler(recent)
    for handler in root.handlers:
        if not any(isinstance(f, ClientTextFilter) for f in handler.filters):
            handler.addFilter(ClientTextFilter())
        if journal and isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
            handler.setFormatter(JournalFormatter())
