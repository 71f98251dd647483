"""The bridge to an upstream broker: two clients back to back (bridge.py) and its settings schema.

Imports common.client, common.broker (topics, settings), common.mqtt and common.compat."""
