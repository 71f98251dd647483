"""Persistence: the record layer, its two backends, and the listener that maps
broker state to records.

May import common.broker.broker (persist), common.crypto, common.mqtt, common.compat."""
