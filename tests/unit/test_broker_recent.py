"""What the broker keeps of its reads: for a moment, one GET for concurrent misses, its own writes first."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gymsandbox.broker.recent import Recent


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Source:
    """The API server's answers, and how many GETs were made."""

    def __init__(self, value: dict[str, Any] | None) -> None:
        self.value, self.gets = value, 0

    def __call__(self) -> dict[str, Any] | None:
        self.gets += 1
        return self.value


def obj(version: str) -> dict[str, Any]:
    return {"metadata": {"name": "ep", "resourceVersion": version}}


def test_a_read_is_kept_for_its_moment_then_read_again() -> None:
    clock, source = Clock(), Source(obj("1"))
    recent = Recent(1.0, clock=clock)
    assert recent.read("ep", source) == obj("1")
    source.value = obj("2")
    clock.now += 0.9
    assert recent.read("ep", source) == obj("1")
    clock.now += 0.2
    assert recent.read("ep", source) == obj("2")
    assert source.gets == 2


def test_a_fresh_read_always_asks_and_is_kept_for_the_next() -> None:
    clock, source = Clock(), Source(obj("1"))
    recent = Recent(1.0, clock=clock)
    recent.read("ep", source)
    source.value = None
    assert recent.read("ep", source, fresh=True) is None
    assert recent.read("ep", source) is None
    assert source.gets == 2


def test_zero_seconds_keeps_nothing() -> None:
    source = Source(obj("1"))
    recent = Recent(0)
    recent.read("ep", source)
    recent.read("ep", source)
    assert source.gets == 2


def test_the_brokers_own_write_replaces_and_a_forget_drops_what_was_kept() -> None:
    clock, source = Clock(), Source(obj("1"))
    recent = Recent(1.0, clock=clock)
    recent.read("ep", source)
    recent.put("ep", obj("2"))
    assert recent.read("ep", source) == obj("2")
    recent.forget("ep")
    assert recent.read("ep", source) == obj("1")
    assert source.gets == 2


def test_concurrent_misses_share_one_get() -> None:
    release, arrived = threading.Event(), threading.Event()
    gets = 0

    def slow() -> dict[str, Any]:
        nonlocal gets
        gets += 1
        arrived.set()
        release.wait(5)
        return obj("1")

    recent = Recent(1.0)
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(recent.read, "ep", slow)
        arrived.wait(5)
        others = [pool.submit(recent.read, "ep", slow) for _ in range(7)]
        release.set()
        answers = [first.result(5), *(f.result(5) for f in others)]
    assert answers == [obj("1")] * 8
    assert gets == 1


def test_a_failed_get_fails_every_call_that_shared_it_and_keeps_nothing() -> None:
    def broken() -> dict[str, Any]:
        raise OSError("connection refused")

    recent = Recent(1.0)
    with pytest.raises(OSError, match="refused"):
        recent.read("ep", broken)
    source = Source(obj("1"))
    assert recent.read("ep", source) == obj("1")
    assert source.gets == 1


def test_an_answer_older_than_the_brokers_own_write_is_not_kept() -> None:
    """A GET that began before a close or a revocation landed must not bring the old object back."""
    recent = Recent(1.0)

    def raced() -> dict[str, Any]:
        recent.put("ep", None)  # the broker's delete answered while this GET was on its way
        return obj("1")

    assert recent.read("ep", raced) == obj("1")  # this caller sees what it read
    assert recent.read("ep", Source(obj("ignored"))) is None  # later ones see the write


def test_a_forget_during_a_get_makes_the_next_read_ask_again() -> None:
    recent = Recent(1.0)

    def raced() -> dict[str, Any]:
        recent.forget("ep")
        return obj("1")

    recent.read("ep", raced)
    source = Source(obj("2"))
    assert recent.read("ep", source) == obj("2")
    assert source.gets == 1


def test_only_what_was_read_in_the_last_moments_stays_in_memory() -> None:
    clock = Clock()
    recent = Recent(1.0, clock=clock)
    for i in range(100):
        recent.read(f"ep-{i}", Source(obj("1")))
    clock.now += 1.5
    recent.read("ep-new", Source(obj("1")))
    assert len(recent) == 1


def test_what_is_kept_has_no_managed_fields() -> None:
    recent = Recent(1.0)
    full = {"metadata": {"name": "ep", "managedFields": [{"manager": "kubectl"}] * 50}, "spec": {}}
    recent.read("ep", Source(full))
    assert recent.read("ep", Source(None)) == {"metadata": {"name": "ep"}, "spec": {}}
