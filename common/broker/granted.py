# ACL rules a login brings with it, beyond the ACL file: a JWT's ACL claim
# (jwt_auth.py) or an HTTP auth hook's answer (external_auth.py), both in
# one shape:
#
#     {"publish": ["devices/%c/out", ...], "subscribe": ["cmd/%u/#", ...]}
#
# "publish" grants write, "subscribe" read (subscribing and receiving), at
# most FILTERS_MAX filters each. %u (user) and %c (client id) are put in as
# the file ACL's patterns do (acl.substitute: one pass, and a name that
# would widen a filter leaves the client no rules at all). add() puts them
# after the rules the file ACL gives the client (acl.for_client), so a deny
# rule of the file still wins; a client given rules here is judged by rules,
# deny by default, even without a file ACL. Loaded only with a JWT or a hook.

from common.broker.acl import READ, WRITE, ClientAcl, substitute
from common.broker.topics import validate_topic_filter

KEYS = ("publish", "subscribe")
FILTERS_MAX = 64


def shape(value):
    """(publish, subscribe) filter lists of `value` (a decoded JSON value),
    or the reason it is not such an object."""
    if not isinstance(value, dict):
        return "the acl is not an object {publish: [...], subscribe: [...]}"
    for key in value:
        if key not in KEYS:
            return "unknown key %s in the acl (wants publish, subscribe)" % key
    out = []
    for key in KEYS:
        filters = value.get(key, [])
        if not isinstance(filters, list) or len(filters) > FILTERS_MAX:
            return "acl %s is not a list of at most %d filters" % (key, FILTERS_MAX)
        for flt in filters:
            # Checked with stand-in names, as the file ACL's patterns are.
            if not isinstance(flt, str) or validate_topic_filter(substitute(flt, "u", "c"), 0, 0):
                return "acl %s holds an invalid topic filter" % key
        out.append(filters)
    return out[0], out[1]


def add(broker, base, user, client_id, rules, source):
    """`base` (the file ACL's ClientAcl, or None) with `rules` (a shape())
    after its own; `source` names them for the log ("the token's")."""
    if base is not None and base.refused is not None:
        return base  # a pattern refused the names: no rules at all
    out = list(base.rules) if base is not None else []
    for bits, filters in ((WRITE, rules[0]), (READ, rules[1])):
        for pattern in filters:
            flt = substitute(pattern, user, client_id)
            if flt is None:
                broker.log(
                    30,
                    "client id %s (user %s): no ACL rules: %s filter %s would put a name holding +, # or / (or empty, or a leading $) into it",
                    (client_id, user, source, pattern),
                )
                return ClientAcl([], (user, client_id))
            out.append((bits, flt, tuple(flt.split("/"))))
    return ClientAcl(out)
