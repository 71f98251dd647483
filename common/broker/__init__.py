"""The broker state machine: connections, sessions, routing, handlers, settings.

Imports common.mqtt, common.crypto and common.compat; never common.store.store."""
