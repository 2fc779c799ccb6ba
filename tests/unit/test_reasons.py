"""api/reasons.py explains every constant of api/conditions.py, and status/ classifies every failure once."""

from __future__ import annotations

import pytest

from gymsandbox.api.conditions import ConditionType, FailureKind, Reason
from gymsandbox.api.reasons import CONDITION_HELP, FAILURE_KIND_HELP, REASON_HELP
from gymsandbox.docgen import FAILING_PODS, failure_kinds
from gymsandbox.status.pod import read_pod


def test_every_reason_has_a_meaning_and_an_action() -> None:
    assert set(REASON_HELP) == set(Reason)
    assert all(help_.meaning.strip() and help_.action.strip() for help_ in REASON_HELP.values())


def test_every_condition_type_and_failure_kind_is_explained() -> None:
    assert set(CONDITION_HELP) == set(ConditionType)
    assert set(FAILURE_KIND_HELP) == set(FailureKind)


def test_no_text_breaks_a_markdown_table() -> None:
    texts = [*CONDITION_HELP.values(), *FAILURE_KIND_HELP.values()]
    texts += [text for help_ in REASON_HELP.values() for text in help_]

    assert [text for text in texts if "|" in text or "\n" in text] == []


@pytest.mark.parametrize(("pod", "sandbox_error"), FAILING_PODS)
def test_each_failing_pod_the_troubleshooting_table_reads_is_a_failure(
    pod: dict[str, object], sandbox_error: str | None
) -> None:
    assert read_pod(pod, sandbox_error).failure is not None


def test_each_failure_reason_has_exactly_one_kind() -> None:
    kinds = failure_kinds()

    assert {reason: found for reason, found in kinds.items() if len(found) != 1} == {}
    assert kinds[Reason.CRASH_LOOP_BACK_OFF] == [FailureKind.WORKLOAD]
    assert kinds[Reason.HOST_NOT_FOUND] == [FailureKind.INFRASTRUCTURE]
    assert Reason.POD_PENDING not in kinds
