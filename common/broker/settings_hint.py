# The known key closest to a mistyped one, for a configuration refusal
# (common/broker/settings.py `check`; the shells' own tables too).
#
# Error path only: settings.py imports this module when it refuses a file,
# so a board whose config is right never loads it into its heap.


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
