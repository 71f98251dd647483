# The start-up both shells run (cpython_host/cli/serve.py, firmware/startup.py):
# the broker and its driver assembled, its security installed, its store
# restored, the sessions of bridges removed from the config retired, and the
# security lines both print. Each shell keeps what touches its platform:
# reading the config and the files it names, opening the store, the clock,
# the log's sink, the listeners, the bridges' runtime, and its own errors.
#
#     driver = assemble(settings, entropy, store, ticks_ms, timeouts, heap, log)
#     driver.set_security(users, acl, allow_anonymous)
#     restore(driver, wall, bridge_names, log)      # with a store, before serving
#     for level, text in security_lines(driver.broker, listeners, hint): ...
#
# On a board this module runs once and is unloaded after the start
# (firmware/startup_only.py).

from common.store.storeboot import new_broker


def assemble(settings, entropy, store, ticks_ms, timeouts, heap, log):
    """The driver around a new broker (its store: Persist over `store`, or
    None); `timeouts`: (close_linger, shutdown_timeout) in s; `heap`: the
    figure $SYS shows, a function or None; `log`: (callable(level, text),
    level) for the core's lines. ValueError for settings the core refuses."""
    return new_driver(new_broker(settings, entropy, store), ticks_ms, timeouts, heap, log)


def new_driver(broker, ticks_ms, timeouts, heap, log):
    """The driver around `broker` (assemble; the host's warm-up brokers too)."""
    from common.driver import Driver

    broker.set_logger(log[0], log[1])
    return Driver(broker, ticks_ms, timeouts[0], timeouts[1], heap)


def restore(driver, wall, bridge_names, log):
    """Load the store (`wall`: the wall clock's seconds), then retire the
    local sessions of bridges no longer configured (`bridge_names` the
    configured ones): else they would go on collecting messages for no one.
    The restore's counts."""
    counts = driver.restore(wall)
    driver.broker.log(
        20,
        "restored %d sessions, %d subscriptions, %d queued messages, %d retained (%d dropped, %d damaged records skipped)",
        (counts["sessions"], counts["subscriptions"], counts["messages"], counts["retained"], counts["dropped"], counts["skipped"]),
    )
    retire_orphans(driver.broker, bridge_names, driver.now, log)
    return counts


def retire_orphans(broker, names, now, log):
    """End the local sessions whose owner is "bridge:<name>" for a name not
    in `names`, their queues dead-lettered (counted, logged: the bridge
    runner's retire_session). The number of messages dead-lettered."""
    orphans = []
    sessions = broker.sessions.by_client_id
    for client_id in sorted(sessions):
        user = sessions[client_id].user
        if isinstance(user, str) and user.startswith("bridge:") and user[7:] not in names:
            orphans.append((client_id, user[7:]))
    if not orphans:
        return 0  # (the bridge's code stays out of a board's heap)
    from common.bridge.runner import retire_session

    n = 0
    for client_id, name in orphans:
        n += retire_session(broker, client_id, now, log, name)
    return n


def security_lines(broker, listeners, hint):
    """The start-up (level, text) lines on users, the ACL and anonymous
    clients, and per listener what anonymous clients meet there and its
    own security and mount point (listener_policy.py); `listeners`: (name,
    loopback only[, listener key]) tuples; `hint`: where the shell's config
    sets users or allow_anonymous."""
    lines = [(20, "security: " + describe(broker))]
    configured = broker.users is not None or broker.allow_anonymous is not None
    for item in listeners:
        name, local = item[0], item[1]
        policy = broker.listener_policies.get(item[2]) if len(item) > 2 else None
        if policy is not None and policy.mount is not None:
            lines.append((20, "%s: mount point %r: its clients' topics are under it" % (name, policy.mount)))
        if policy is not None and policy.own:
            lines.append((20, "%s: security of its own: %s" % (name, describe(policy))))
        elif configured:
            continue
        elif local:
            lines.append((20, "%s: no users configured: serving anonymous clients of this host only (loopback)" % name))
        else:
            lines.append(
                (
                    30,
                    "%s is reachable from the network (not loopback-only) without users: anonymous clients are"
                    " refused there (CONNACK 0x05 / 0x87). Set %s" % (name, hint),
                )
            )
    return lines


def describe(broker):
    """The start-up (and reload) log line's words: what is on (of the
    broker, or of a listener's own policy: the same three attributes)."""
    users = broker.users
    acl = broker.acl
    allow = broker.allow_anonymous
    if allow is None:
        anon = "only on loopback-only listeners (allow_anonymous not set)" if users is None else "refused (a password file is set, allow_anonymous not set)"
    else:
        anon = "allowed (allow_anonymous = true)" if allow else "refused (allow_anonymous = false)"
    return "users: %s; ACL: %s; anonymous clients: %s" % (
        "%d in the password file" % len(users) if users is not None else "none (no password file)",
        "%d rules, deny by default" % acl.rule_count() if acl is not None else "off (every client reads and writes every topic but $SYS/ writes)",
        anon,
    )
