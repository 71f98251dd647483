# The words of a configuration refusal (common/broker/settings.py `check`):
# what a key wants, and the known key closest to a mistyped one.
#
# Error path only: settings.py imports this module when it refuses a file,
# so a board whose config is right never loads it into its heap.

from common.broker.settings import K_BOOL, K_CHOICE, K_FILTERS, K_INT, K_LIST, K_NUMBER, K_STR


def _distance(a, b):
    # Optimal string alignment distance: edits, a swap of neighbours counting one.
    prev2 = None
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if prev2 is not None and i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d = min(d, prev2[j - 2] + 1)
            row[j] = d
        prev2 = prev
        prev = row
    return prev[len(b)]


def did_you_mean(name, choices):
    """'; did you mean 'x'?' for the closest of `choices` (in their order), or ''."""
    best = None
    best_d = max(1, len(name) // 3) + 1
    for choice in choices:
        d = _distance(name, choice)
        if d < best_d:
            best, best_d = choice, d
    return "; did you mean %r?" % best if best is not None else ""


def wants(kind, lo, hi):
    """What a key of `kind` (bounded by lo, hi) accepts, in words."""
    if kind == K_INT or kind == K_NUMBER:
        what = "an integer" if kind == K_INT else "a number"
        if hi is None:
            return "%s >= %d" % (what, lo)
        return "%s %d..%d" % (what, lo, hi)
    if kind == K_BOOL:
        return "true or false"
    if kind == K_STR:
        return "a string"
    if kind == K_CHOICE:
        return "one of " + ", ".join(lo)
    if kind == K_LIST:
        return 'a list of strings, e.g. ["a", "b"]'
    if kind == K_FILTERS:
        return 'a list of strings that are valid topic filters, e.g. ["a/#", "+/b"]'
    return "a table ({...} in JSON, [name] in TOML)"
