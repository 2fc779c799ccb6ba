"""Kubernetes resource quantities ("500m", "1.5Gi", "4G", "1e3") as exact decimals, to compare with caps."""

from __future__ import annotations

import re
from decimal import Decimal, localcontext

# Resource quantities are never negative, so unlike the API server's grammar no sign is accepted.
_QUANTITY = re.compile(
    r"(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exponent>[+-]?[0-9]{1,3})|(?P<decimal>[numkMGTPE]?))"
)
_BINARY_MULTIPLIERS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str) -> Decimal:
    """The exact value of a quantity: "500m" -> 0.5, "1Ki" -> 1024, "1e3" -> 1000.

    Raises ValueError naming the text when it is not a non-negative Kubernetes quantity ("1Gii", "-1", "").
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f'"{text}" is not a Kubernetes quantity (examples: 500m, 2, 1.5Gi, 4G)')
    number = match["number"]
    if match["binary"] is not None:
        # Enough precision that multiplying by up to 2**60 is exact.
        with localcontext() as context:
            context.prec = len(number) + 24
            return Decimal(number) * _BINARY_MULTIPLIERS[match["binary"]]
    given = match["exponent"]
    exponent = _DECIMAL_EXPONENTS[match["decimal"]] if given is None else int(given)
    # Built from its digits and exponent, so no rounding happens.
    return Decimal(f"{number}E{exponent}")
