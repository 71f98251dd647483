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


def set_security(broker, users, acl, allow_anonymous, now, listeners=None):
    """Install users (users.Users or None), rules (acl.Acl or None) and the
    anonymous switch (True, False, None = not set), and the listeners' own
    (`listeners`: the shell's listener key -> listener_policy.ListenerPolicy,
    or None); re-check connected clients."""
    from common.broker.login import brought_by, client_rules, security_of

    listeners = listeners or {}
    secured_needed = users is not None or acl is not None or broker.jwt is not None or broker.hook is not None
    any_acl = acl is not None
    for key in listeners:
        policy = listeners[key]
        secured_needed = secured_needed or policy.users is not None or policy.acl is not None
        any_acl = any_acl or policy.acl is not None
    if secured_needed:
        # Loaded here, with the users or the rules (start-up, reload), so
        # that no CONNECT has to load it; a broker without either never does.
        from common.broker import secured
    broker.users = users
    broker.acl = acl
    broker.allow_anonymous = allow_anonymous
    broker.listener_policies = listeners
    for conn in broker.connections.by_id:
        session = conn.session
        if session is None or session.conn is not conn:
            continue
        conn.acl = client_rules(broker, conn.user, conn.peer, session.client_id, brought_by(broker, conn))
        if conn.acl is not None:
            secured.recheck(broker, conn, session, now)
    if any_acl:
        secured.recheck_wills(broker, security_of, now)
