"""Child names and label values: deterministic, within 63 characters, valid DNS-1123 labels, never shared."""

from __future__ import annotations

import re

import pytest

from gymsandbox.desired.names import (
    CHILD_SUFFIXES,
    DNS_LABEL_MAX,
    child_name,
    fit,
    label_value,
    owned_child_name,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A label value: empty, or 63 characters at most that start and end with an alphanumeric.
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
SUFFIXES = ["host", "lease", "egress"]
PINNED_LONG_CHILD_NAME = "a" * 49 + "-28165978-host"  # sha256("a" * 100)[:8]

# Valid GymHost names: the API server accepts any DNS subdomain (253 characters, dots allowed).
OWNERS = [
    "a",
    "swe-gym-run-1",
    "a" * 63,
    "a" * 64,
    "a" * 253,
    "x" + "-" * 60 + "y",
    "run-" + "-" * 70 + "z",
    "1abc",
    "0" * 253,
    "llama-3.1-eval",
    "a" + ".b" * 126,
    "a" * 52 + "." + "b" * 20,
]


@pytest.mark.parametrize("owner", OWNERS)
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_child_name_fits_a_dns_label(owner: str, suffix: str) -> None:
    name = child_name(owner, suffix)
    assert len(name) <= DNS_LABEL_MAX
    assert DNS_LABEL.match(name), name


@pytest.mark.parametrize("owner", OWNERS)
def test_child_name_starts_with_a_letter(owner: str) -> None:
    assert child_name(owner, "host")[0].isalpha()


@pytest.mark.parametrize("owner", OWNERS)
def test_child_name_ends_with_the_suffix(owner: str) -> None:
    assert child_name(owner, "lease").endswith("-lease")


@pytest.mark.parametrize("owner", OWNERS)
def test_child_name_is_deterministic(owner: str) -> None:
    assert child_name(owner, "host") == child_name(owner, "host")


def test_child_name_of_a_long_owner_is_pinned_across_processes() -> None:
    # A restarted operator must find the same children: the hash is sha256, not Python's salted hash().
    assert child_name("a" * 100, "host") == PINNED_LONG_CHILD_NAME


@pytest.mark.parametrize(
    ("owner", "suffix", "expected"),
    [
        ("swe-gym-run-1", "host", "swe-gym-run-1-host"),
        ("a", "lease", "a-lease"),
        ("a" * 57, "host", "a" * 57 + "-host"),
        ("a" * 55, "egress", "a" * 55 + "-egress"),
    ],
)
def test_child_name_keeps_a_short_name_unchanged(owner: str, suffix: str, expected: str) -> None:
    assert child_name(owner, suffix) == expected


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("a" * 100 + "-one", "a" * 100 + "-two"),
        ("run-" + "x" * 60 + "1", "run-" + "x" * 60 + "2"),
        ("0" * 80 + "1", "0" * 80 + "2"),
        (
            "1abc",
            "g1abc",
        ),  # a digit-led name gets a "g" prefix; it must not collide with the real "g..." name
        ("llama-3.1-eval", "llama-3-1-eval"),  # dots are not allowed in a label; "a.b" and "a-b" stay apart
        ("a.b", "a-b"),
        ("a" + ".b" * 126, "a" + "-b" * 126),
    ],
)
def test_child_name_gives_distinct_owners_distinct_names(first: str, second: str) -> None:
    assert child_name(first, "host") != child_name(second, "host")


@pytest.mark.parametrize(
    ("value", "limit"),
    [("a" * 63, 63), ("abc", 63), ("", 63), ("abcdefghij", 10)],
)
def test_fit_keeps_a_value_within_the_limit_unchanged(value: str, limit: int) -> None:
    assert fit(value, limit) == value


@pytest.mark.parametrize("value", ["a" * 64, "a" * 253, "b-" * 40 + "b", "a" + "-" * 60 + "-bc" * 10])
@pytest.mark.parametrize("limit", [20, 40, 63])
def test_fit_shortens_a_long_label_to_a_label_within_the_limit(value: str, limit: int) -> None:
    fitted = fit(value, limit)
    assert len(fitted) <= limit
    assert DNS_LABEL.match(fitted), fitted


@pytest.mark.parametrize("limit", [20, 40, 63])
def test_fit_never_ends_the_kept_prefix_with_a_dot_or_dash(limit: int) -> None:
    fitted = fit("c." * 40 + "c", limit)
    assert len(fitted) <= limit
    assert LABEL_VALUE.match(fitted), fitted


def test_fit_is_deterministic() -> None:
    value = "gym-" * 30
    assert fit(value) == fit(value)


def test_fit_gives_distinct_long_values_distinct_results() -> None:
    values = [f"{'p' * 70}-{i}" for i in range(200)]
    assert len({fit(v) for v in values}) == len(values)


@pytest.mark.parametrize("value", ["swe-gym-run-1", "a", "a" * 63, "llama-3.1-eval"])
def test_label_value_keeps_a_short_value_unchanged(value: str) -> None:
    assert label_value(value) == value


@pytest.mark.parametrize("value", ["a" * 64, "a" * 253, "run-" + "x" * 100, "9" * 200])
def test_label_value_of_a_long_dns_label_is_a_dns_label(value: str) -> None:
    result = label_value(value)
    assert len(result) <= DNS_LABEL_MAX
    assert DNS_LABEL.match(result), result


@pytest.mark.parametrize("value", OWNERS)
def test_label_value_is_a_valid_label_value(value: str) -> None:
    result = label_value(value)
    assert len(result) <= DNS_LABEL_MAX
    assert LABEL_VALUE.match(result), result


def test_label_value_gives_distinct_long_values_distinct_results() -> None:
    assert label_value("h" * 80 + "1") != label_value("h" * 80 + "2")


def test_label_value_is_deterministic() -> None:
    assert label_value("h" * 80) == label_value("h" * 80)


def test_no_two_owner_kinds_can_claim_one_child_name() -> None:
    """Of two owner kinds, no suffix for a child kind equals the other's or ends with "-" and it: a GymHost
    and an EpisodeSandbox named alike (or `a` and `a-<x>`) in one namespace then never need one name."""
    kinds = list(CHILD_SUFFIXES)
    for one, other in ((a, b) for a in kinds for b in kinds if a != b):
        for child_kind, suffix in CHILD_SUFFIXES[one].items():
            theirs = CHILD_SUFFIXES[other].get(child_kind)
            if theirs is None:
                continue
            assert suffix != theirs, (one, other, child_kind)
            assert not suffix.endswith(f"-{theirs}"), (one, other, child_kind)


@pytest.mark.parametrize("name", ["a", "a-sandbox", "swe-gym-run-1", "x" * 70, "1abc", "a.b"])
def test_a_host_and_an_episode_of_related_names_share_no_child(name: str) -> None:
    """Exhaustively for a few names: every child of a host named `name` or `name-<suffix>` against every
    child of an episode named `name` or `name-<suffix>`, kind by kind."""
    names = [name, *(f"{name}-{s}" for suffixes in CHILD_SUFFIXES.values() for s in suffixes.values())]
    for child_kind in ("Secret", "NetworkPolicy", "Pod"):
        hosts = {owned_child_name("GymHost", n, child_kind) for n in names}
        episodes = {owned_child_name("EpisodeSandbox", n, child_kind) for n in names}
        assert not hosts & episodes, child_kind
