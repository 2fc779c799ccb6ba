"""The engine's one cache (kube/memo.py): a value is computed once per versions of its inputs, kept per
object, and dropped with its object or once nothing was kept for it for too long."""

from __future__ import annotations

from gymsandbox.kube.memo import Memo


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_value_is_computed_once_per_versions_and_again_when_they_change() -> None:
    memo, computed = Memo(), []

    def compute(value: str) -> str:
        computed.append(value)
        return value

    assert memo.get("u1", "verdict", ("rv1",), lambda: compute("a")) == "a"
    assert memo.get("u1", "verdict", ("rv1",), lambda: compute("b")) == "a"  # same versions: kept
    assert memo.get("u1", "verdict", ("rv2",), lambda: compute("b")) == "b"
    assert memo.get("u1", "slot", ("rv2",), lambda: compute("c")) == "c"  # another value of the object
    assert computed == ["a", "b", "c"]


def test_an_equal_value_computed_again_is_the_same_object_when_asked() -> None:
    memo = Memo()
    first = memo.get("u1", "verdict", 1, lambda: ["refused"], same_if_equal=True)
    assert memo.get("u1", "verdict", 2, lambda: ["refused"], same_if_equal=True) is first
    assert memo.get("u1", "verdict", 3, lambda: ["refused"]) is not first


def test_what_was_found_to_hold_holds_only_for_exactly_those_versions() -> None:
    memo = Memo()
    memo.agreed("u1", "ready-agrees", ("rv1", "pod-rv1"))
    assert memo.agrees("u1", "ready-agrees", ("rv1", "pod-rv1"))
    assert not memo.agrees("u1", "ready-agrees", ("rv1", "pod-rv2"))
    memo.agreed("u1", "ready-agrees", None)
    assert not memo.agrees("u1", "ready-agrees", ("rv1", "pod-rv1"))


def test_an_objects_values_go_with_it_and_with_time_unchanged() -> None:
    clock = Clock()
    memo = Memo(clock)
    memo.get("gone", "verdict", 1, lambda: "x")
    memo.get("idle", "verdict", 1, lambda: "y")
    memo.get("busy", "verdict", 1, lambda: "z")
    memo.forget("gone")
    assert len(memo) == 2
    clock.now = 100.0
    memo.get("busy", "verdict", 2, lambda: "z2")  # kept again: still in use
    memo.prune(idle_seconds=50)
    assert len(memo) == 1
    assert memo.get("busy", "verdict", 2, lambda: "recomputed") == "z2"
