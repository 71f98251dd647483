# The users and ACL a shell's config names, read the same way on the host
# (cpython_host/config.py: [security]) and on a board (firmware/boardcfg.py:
# the device config), and installed in the broker (set_security, through
# Driver.set_security). The shell only says how to read a file; what is made
# of it, and in what order the rules come, is decided here once. Run at
# start-up and at a host's SIGHUP only (firmware/startup_only.py unloads it
# on a board).


def load_security(read, password_file=None, acl_file=None, acl_rules=None, rules_source=""):
    """(Users or None, Acl or None) from the files named and the inline rules.

    `read(name, key)` returns a file's text ("password_file" or "acl_file" as
    `key`, for its error) or raises ConfigError "FILE: why"; a file's problems
    are ConfigError "FILE:LINE: reason". `acl_rules` (the host's [security]
    acl, from `rules_source`) come after the ACL file's. The modules are
    imported only when needed: a board without users keeps them out of RAM."""
    users = None
    acl = None
    if password_file is not None:
        from common.broker.users import Users

        users = Users.parse(read(password_file, "password_file"), password_file)
    if acl_file is not None or acl_rules is not None:
        from common.broker.acl import Acl

        if acl_file is not None:
            acl = Acl.parse(read(acl_file, "acl_file"), acl_file)
        if acl_rules is not None:
            acl = Acl.from_rules(acl_rules, rules_source, acl)
    return users, acl


def set_security(broker, users, acl, allow_anonymous, now):
    """Install users (users.Users or None), rules (acl.Acl or None) and the
    anonymous switch (True, False, None = not set); re-check connected clients."""
    from common.broker.login import client_rules

    if users is not None or acl is not None:
        # Loaded here, with the users or the rules (start-up, reload), so
        # that no CONNECT has to load it; a broker without either never does.
        from common.broker import secured
    broker.users = users
    broker.acl = acl
    broker.allow_anonymous = allow_anonymous
    for conn in broker.connections.by_id:
        session = conn.session
        if session is None or session.conn is not conn:
            continue
        conn.acl = client_rules(broker, conn.user, conn.peer, session.client_id)
        if conn.acl is not None:
            secured.recheck(broker, conn, session, now)
    if acl is not None:
        secured.recheck_wills(broker, acl, now)
