"""Moving from Mosquitto: its configuration (conf), its bridge sections (bridge), its persistence file (db)."""
