# What one listener of the shell decides for the clients that come in on it
# (Mosquitto's per_listener_settings): its own users, ACL and anonymous
# switch, and its mount point.
#
# Theory of operation. The shell names each connection's listener by a key,
# the 4th item of the peer tuple it hands Broker.connection_made (the host:
# the [[listener]] table's index); set_security installs a ListenerPolicy per
# key that has one (broker.listener_policies). A policy with `own` security
# replaces the broker's users, ACL and allow_anonymous for its listener's
# clients (login.security_of): the broker's [security] is not consulted, as
# in Mosquitto. Without `own` it only carries the mount point. A listener
# without a policy uses the broker's.
#
# The mount point (Mosquitto's mount_point) is a prefix put before every
# topic a client of that listener names — PUBLISH topic, will topic,
# SUBSCRIBE and UNSUBSCRIBE filters (a shared subscription's inner filter)
# — and taken off every topic sent to it (egress.send_publish). Routing,
# retained messages, the ACL and the store see the whole topic; the client
# sees its own part only, and nothing outside the prefix matches its
# filters (its "$SYS/#" is "PREFIX$SYS/#": the broker's $SYS is not
# visible there, as in Mosquitto). Set on a connection at accept
# (Extras.mount): a change of mount_point at a reload reaches new connections.
# Host only: a board's shell names no listener and never loads this module.


class ListenerPolicy:
    """A listener's own users (users.Users or None), rules (acl.Acl or None),
    anonymous switch (True, False, None = not set) when `own`, and its mount
    point (a topic prefix, or None)."""

    __slots__ = ("acl", "allow_anonymous", "mount", "own", "users")

    def __init__(self, own, users=None, acl=None, allow_anonymous=None, mount=None):
        self.own = own
        self.users = users
        self.acl = acl
        self.allow_anonymous = allow_anonymous
        self.mount = mount or None


def mount_filter(mount, flt):
    """A client's topic filter `flt` under `mount`: a shared subscription's
    inner filter is prefixed, its "$share/NAME/" kept in front."""
    if flt.startswith("$share/"):
        slash = flt.find("/", 7)
        if slash > 0:
            return flt[: slash + 1] + mount + flt[slash + 1 :]
    return mount + flt
