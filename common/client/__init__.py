"""A sans-I/O MQTT client (3.1.1 and 5.0): what the bridge speaks to both brokers.

Imports common.mqtt and common.compat only."""
