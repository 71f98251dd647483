# Client text is data: what a client sends (client id, user name, topic,
# a header) never becomes structure in our log lines or Reason Strings.
#
# words() is the one formatter of both: its format is ours, its arguments
# are data, each cut to CLIENT_TEXT_MAX characters (clip: a 65,535-byte user
# name must not make a 65 KB line) and escaped (printable: one line stays
# one line, and a terminal escape stays text). Broker.log formats every log
# line with it, refusal.refuse_connect every refusal; the host's logging
# filter (cpython_host/logtext.py) applies clip and printable to every
# argument of the host's own log lines; a shell's sink (the host's filter,
# the firmware's Log) escapes the control characters of every whole line.

# Client text echoed in a log line or a Reason String is cut after this
# many characters.
CLIENT_TEXT_MAX = 128
# The longest Reason String sent (characters): our words with some client
# text in them fit; at most 4 bytes a character, far below 65,535 bytes.
REASON_STRING_MAX = 1024


def needs_escape(text, backslash=True):
    """Whether printable() changes `text` (without `backslash`: whether it
    holds a control character)."""
    for ch in text:
        o = ord(ch)
        if o < 0x20 or 0x7F <= o <= 0x9F or o == 0x2028 or o == 0x2029 or (o == 0x5C and backslash):
            return True
    return False


def printable(text, backslash=True):
    """`text` with control characters (C0, DEL, C1, U+2028/9) and the
    backslash written as escapes (\\n, \\x1b, \\u2028, \\\\): one log line stays
    one line, and an escape in the text cannot pass for one we wrote.
    Without `backslash`, backslashes stay: for a whole line at a shell's
    sink, whose arguments words() escaped already."""
    if not needs_escape(text, backslash):
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if o == 0x5C and backslash:
            out.append("\\\\")
        elif o == 0x0A:
            out.append("\\n")
        elif o == 0x0D:
            out.append("\\r")
        elif o == 0x09:
            out.append("\\t")
        elif o < 0x20 or 0x7F <= o <= 0x9F:
            out.append("\\x%02x" % o)
        elif o == 0x2028 or o == 0x2029:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    return "".join(out)


def clip(text, limit=CLIENT_TEXT_MAX):
    """`text`, or its first `limit` characters and how many bytes were cut."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    return "%s\u2026(+%d bytes)" % (head, len(text.encode()) - len(head.encode()))


def _data(arg):
    # An argument of a log line or a Reason String: client text (a str) is
    # cut and escaped; a (format, args) pair is formatted the same way.
    if isinstance(arg, str):
        return printable(clip(arg))
    if isinstance(arg, tuple):
        return words(arg)
    return arg


def words(why):
    """The text of `why`: a str, which is data (cut and escaped as client
    text is), or a pair (format, args) whose format is ours and whose args
    are data (a nested pair is formatted the same way). Every refusal's
    words, log line and Reason String alike, go through here."""
    if isinstance(why, str):
        return printable(clip(why))
    fmt, args = why
    return fmt % tuple([_data(a) for a in args])


def user_name(user):
    """A user as the log names it: its name, or "(anonymous)" for None."""
    return "(anonymous)" if user is None else user
