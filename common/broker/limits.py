# The broker's limits at run time: the Limits object (`broker.settings`)
# every part of the broker reads (s.max_connections, ...), one attribute per key of
# settings.LIMITS.
#
# Why a module of its own: the schema and its checks (settings.py) run only
# when a config is read. A function keeps its whole module alive, so if this
# class (or a method of it) lived there a board would hold the schema and the
# validator in its heap for as long as the broker runs; here it holds only
# this class, and unloads settings.py once started (firmware/startup_only.py).
# It imports nothing: settings.py fills it.
# ConfigError lives here too, so that it stays one class while settings.py
# is unloaded and loaded again (a second start-up in one process).


class ConfigError(ValueError):
    """A configuration mistake; str() is the one-line message for the user."""


class Limits:
    """The broker's limits: one attribute per key of settings.LIMITS, set by
    settings.new_settings / update_settings (a plain object, so that it
    holds no reference to the schema's module), and `per_listener`: the
    listeners' own rate settings (settings.LISTENER_RATES)."""
