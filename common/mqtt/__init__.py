"""The wire: MQTT 3.1.1 and 5.0 packets, properties, reason codes, UTF-8 rules.

Imports only common.compat."""
