"""External authentication on the host: JWT keys (files, a JWKS URL) and the HTTP auth hook (docs/security.md)."""
