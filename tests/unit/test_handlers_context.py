"""Which namespaces an operator instance serves: its --namespace patterns (globs, "!" excludes)."""

from __future__ import annotations

import contextvars
import threading
import time
from typing import cast

import pytest

from gymsandbox.handlers.context import Coalesced, KeyedLocks, OperatorContext
from gymsandbox.kube.client import Kube
from gymsandbox.leases import SigningKey
from gymsandbox.policy.cluster import ClusterPolicy


def context(*patterns: str) -> OperatorContext:
    return OperatorContext(
        policy=ClusterPolicy(), kube=cast(Kube, None), signing_key=SigningKey.generate(), namespaces=patterns
    )


@pytest.mark.parametrize(
    ("patterns", "namespace", "served"),
    [
        ((), "anything", True),
        (("t-*",), "t-one", True),
        (("t-*",), "o-one", False),
        (("evals",), "evals", True),
        (("*", "!kube-*"), "kube-system", False),
        (("*", "!kube-*"), "evals", True),
        (("!o-*",), "t-one", True),
        (("!o-*",), "o-one", False),
    ],
)
def test_namespace_patterns(patterns: tuple[str, ...], namespace: str, served: bool) -> None:
    assert context(*patterns).watches(namespace) is served


def test_prune_drops_what_is_kept_for_objects_idle_too_long_but_never_a_held_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Objects whose deletion the operator never saw (a watch gap) are forgotten once idle: the maps stay
    as large as the objects reconciled lately."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    ctx = context()
    locks = {}
    for uid in ("gone-host", "live-host", "busy-host"):
        locks[uid] = ctx.locks(uid)
        ctx.due(f"drift/{uid}", 10)
        ctx.lingering[uid] = 1
    clock[0] += 3000
    ctx.locks("live-host")
    ctx.due("drift/live-host", 10)
    clock[0] += 1000  # gone-host and busy-host idle for 4000 s, but busy-host's lock is held
    with locks["busy-host"]:
        ctx.prune(idle_seconds=3600)
    assert ("gone-host" in ctx.locks, "live-host" in ctx.locks, "busy-host" in ctx.locks) == (
        False,
        True,
        True,
    )
    assert sorted(ctx.lingering) == ["busy-host", "live-host"]
    assert ctx._last_run == {"drift/live-host": 4000.0}


def test_a_request_is_covered_only_by_a_run_begun_after_it() -> None:
    plans = Coalesced()
    first = plans.ask("h")
    covers = plans.begin("h")  # a run starts: it sees what `first` saw
    second = plans.ask("h")  # asked while that run goes on: it may have missed this one's change
    plans.done("h", covers)
    assert plans.covered("h", first)
    assert not plans.covered("h", second)
    plans.done("h", plans.begin("h"))
    assert plans.covered("h", second)
    assert not plans.covered("other", plans.ask("other"))


def test_a_forgotten_key_starts_over() -> None:
    plans = Coalesced()
    plans.ask("h")
    plans.done("h", plans.begin("h"))
    plans.forget("h")
    assert not plans.covered("h", plans.ask("h"))


def test_a_lock_is_busy_while_held_and_once_asked_for_after_the_moment() -> None:
    locks = KeyedLocks()
    assert not locks.busy_since("u", time.monotonic())  # never asked for
    with locks("u"):
        assert locks.busy_since("u", time.monotonic() + 60)
    moment = time.monotonic()
    assert not locks.busy_since("u", moment)  # released, and last asked for before `moment`
    with locks("u"):
        pass
    assert locks.busy_since("u", moment)


def test_alongside_runs_on_another_thread_in_the_callers_context_and_hands_back_its_error() -> None:
    ctx = context()
    where = contextvars.ContextVar("where", default="nowhere")
    where.set("the handler")
    ran = ctx.alongside(lambda: (threading.current_thread() is not threading.main_thread(), where.get()))
    assert ran.result(timeout=5) == (True, "the handler")

    def conflict() -> None:
        raise ValueError("taken")

    with pytest.raises(ValueError, match="taken"):
        ctx.alongside(conflict).result(timeout=5)
