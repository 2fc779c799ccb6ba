"""What of a log may reach status: the secrets a pod holds are cut out, as printed and in the encodings
untrusted code reaches for first (base64 in either alphabet, at any alignment inside a longer blob; hex; URL
escapes), and so is anything shaped like a lease token. Pure: tests/unit/test_redaction.py."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import quote

REDACTED = "[REDACTED]"
# Any lease token (another run's too): gs1.<payload>.<signature>, base64url.
LEASE_TOKEN_SHAPE = re.compile(r"gs1\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
# Shorter secrets are cut out only as printed: their encodings are short enough to occur by chance.
ENCODED_MIN_LENGTH = 8


def base64_cores(secret: bytes) -> set[str]:
    """What any base64 text that encodes `secret` (alone or inside longer data, at any of the three byte
    alignments, in the standard or URL-safe alphabet) must contain: the characters that encode the secret's
    bytes alone."""
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret).decode()
        first = -(-8 * offset // 6)  # the first character made of the secret's bits only
        last = 8 * (offset + len(secret)) // 6  # past the last such character
        core = encoded[first:last]
        cores |= {core, core.replace("+", "-").replace("/", "_")}
    return cores


def encodings(secret: str) -> set[str]:
    """`secret` as printed and, when long enough, as commonly encoded."""
    forms = {secret}
    if len(secret) >= ENCODED_MIN_LENGTH:
        raw = secret.encode()
        forms |= base64_cores(raw) | {raw.hex(), raw.hex().upper(), quote(secret, safe="")}
    return {form for form in forms if form}


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every form of every secret, and any lease token, replaced by REDACTED."""
    forms = {form for secret in secrets if secret for form in encodings(secret)}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return LEASE_TOKEN_SHAPE.sub(REDACTED, text)
