"""Cryptography in pure Python for MicroPython: AES-GCM, HKDF, HMAC-SHA256, SCRAM.

Imports nothing of common/ but common.compat."""
