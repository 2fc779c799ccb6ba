"""parse_quantity: Kubernetes quantities as exact decimals."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gymsandbox.policy.quantity import parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", Decimal(0)),
        ("2", Decimal(2)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("100n", Decimal("0.0000001")),
        ("250u", Decimal("0.00025")),
        ("1k", Decimal(1000)),
        ("4G", Decimal(4 * 10**9)),
        ("2T", Decimal(2 * 10**12)),
        ("1P", Decimal(10**15)),
        ("1E", Decimal(10**18)),
        ("1Ki", Decimal(1024)),
        ("512Mi", Decimal(512 * 2**20)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("1e3", Decimal(1000)),
        ("5E-1", Decimal("0.5")),
        ("12e+2", Decimal(1200)),
    ],
)
def test_parses_each_suffix(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_binary_suffix_is_exact_for_long_numbers() -> None:
    digits = "123456789012345678901234567890"
    assert parse_quantity(f"{digits}.5Ei") == Decimal(int(digits) * 2**60 + 2**59)


@pytest.mark.parametrize(
    ("smaller", "larger"), [("999m", "1"), ("1G", "1Gi"), ("1023Mi", "1Gi"), ("7.9", "8")]
)
def test_orders_by_value_not_text(smaller: str, larger: str) -> None:
    assert parse_quantity(smaller) < parse_quantity(larger)


@pytest.mark.parametrize(("a", "b"), [("1000m", "1"), ("1024Mi", "1Gi"), ("1k", "1e3"), ("0.5Ki", "512")])
def test_equal_values_written_differently(a: str, b: str) -> None:
    assert parse_quantity(a) == parse_quantity(b)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Gi",
        "1Gii",
        "1KI",
        "1 Gi",
        " 1",
        "-1",
        "+1",
        "1.2.3",
        "1e",
        "1e1234",
        "abc",
        "0x10",
        "\u0661",
        "1,5",
        ".",
    ],
)
def test_refuses_junk(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(text)


def test_error_names_the_text() -> None:
    with pytest.raises(ValueError, match='"1Gii"'):
        parse_quantity("1Gii")
