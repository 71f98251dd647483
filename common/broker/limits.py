# The broker's limits at run time: the Settings object every part of the
# broker reads (s.max_connections, ...), one attribute per key of
# settings.LIMITS.
#
# Why a module of its own: the schema and its checks (settings.py) run only
# when a config is read. A function keeps its whole module alive, so if this
# class lived there a board would hold the schema and the validator in its
# heap for as long as the broker runs; here it holds only this class, and
# unloads settings.py once started (firmware/app.py STARTUP_ONLY).
# ConfigError lives here too, so that it stays one class while settings.py
# is unloaded and loaded again (a second start-up in one process).


class ConfigError(ValueError):
    """A configuration mistake; str() is the one-line message for the user."""


class Settings:
    """The broker's limits; attributes named as in settings.LIMITS."""

    def __init__(self, overrides=None, where="settings"):
        from common.broker.settings import LIMITS, defaults  # (config time only)

        values = defaults(LIMITS)
        for name in values:
            setattr(self, name, values[name])
        if overrides:
            self.update(overrides, where)

    def update(self, overrides, where="settings"):
        """Apply a dict of overrides; raise ConfigError (a ValueError) naming a bad key or value."""
        from common.broker.settings import LIMITS, LIMITS_DOC, check  # (config time only)

        values = check(where, overrides, LIMITS, LIMITS_DOC)
        for name in values:
            setattr(self, name, values[name])
