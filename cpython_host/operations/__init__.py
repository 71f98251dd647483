"""Running it in view: metrics, the status page and its HTTP server, certificates, the store monitor, systemd's notifications, per-client figures."""
