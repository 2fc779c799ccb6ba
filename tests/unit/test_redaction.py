"""What of a log may reach status (status/redaction.py): a secret the pod holds is cut out as printed and as
untrusted code would most likely encode it to get it past an exact match: base64 (either alphabet, alone or
at any alignment inside a longer blob), hex, URL escapes. Short values only as printed."""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest

from gymsandbox.status.redaction import REDACTED, redact

SECRET = "sk-live-0123456789abcdef"
TOKEN = "gs1.eyJvd25lciI6InJ1biJ9.c2lnbmF0dXJlLW9mLWEtbGVhc2U"


def b64(data: bytes, urlsafe: bool = False) -> str:
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(data).decode()


@pytest.mark.parametrize(
    "printed",
    [
        SECRET,
        b64(SECRET.encode()),
        b64(SECRET.encode()).rstrip("="),
        b64(b"x" + SECRET.encode()),  # inside a longer blob, one byte off
        b64(b"key=" + SECRET.encode() + b"\n"),  # one byte off the other way, padded
        b64(b"ab" + SECRET.encode() + b"cd"),
        b64(b"\xfb\xff" + SECRET.encode() + b"\xff", urlsafe=True),
        SECRET.encode().hex(),
        SECRET.encode().hex().upper(),
        quote("api key: " + SECRET, safe=""),
    ],
    ids=["plain", "base64", "base64-unpadded", "base64-offset-1", "base64-offset-4", "base64-offset-2",
         "base64url-offset-2", "hex", "HEX", "url-escaped"],
)  # fmt: skip
def test_a_secret_does_not_reach_status_as_printed_or_encoded(printed: str) -> None:
    tail = redact(f"env dump: {printed} end", [SECRET])
    assert REDACTED in tail
    for form in (SECRET, SECRET.encode().hex(), b64(SECRET.encode())[4:16]):
        assert form not in tail, tail


def test_any_lease_token_is_cut_and_the_rest_of_the_log_is_kept() -> None:
    assert redact(f"stolen {TOKEN} here; exit 1", []) == f"stolen {REDACTED} here; exit 1"


def test_a_short_value_is_cut_only_as_printed() -> None:
    """Its encodings are short enough to occur by chance in an ordinary log."""
    short = "abc123"
    assert redact(f"x={short} y={short.encode().hex()}", [short]) == f"x={REDACTED} y={short.encode().hex()}"


def test_nothing_to_redact_leaves_the_log_as_it_is() -> None:
    log = "Traceback (most recent call last):\n  ValueError: bad reward"
    assert redact(log, [SECRET, ""]) == log
