# Siskin: the shared core (docs/architecture.md).

VERSION = "0.1.0"  # the release; $SYS/broker/version and `siskin --version` say it
