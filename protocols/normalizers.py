"""Named pure normalizers a contract applies to arguments after schema validation
(docs/design.md#demo): equal inputs canonicalize to one snapshot. A refusal is a `ValueError` whose
text the caller reports as `schema_invalid` at the argument's pointer."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

# ISO 4217 minor units for the currencies accepted here; unlisted codes are refused.
CURRENCY_MINOR_UNITS: Mapping[str, int] = {
    **dict.fromkeys(
        ["AED", "AUD", "BRL", "CAD", "CHF", "CNY", "CZK", "DKK", "EUR", "GBP", "HKD", "HUF",
         "ILS", "INR", "MXN", "NOK", "NZD", "PLN", "RON", "SEK", "SGD", "THB", "TRY", "TWD",
         "USD", "ZAR"], 2),
    **dict.fromkeys(["CLP", "ISK", "JPY", "KRW", "VND"], 0),
    **dict.fromkeys(["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"], 3),
}


_AMOUNT = re.compile(r"[0-9]{1,18}(\.[0-9]{1,3})?")


def _decimal_amount(value: Any, arguments: Mapping[str, Any]) -> str:
    """`"10"`, `"10.0"` and `"10.00"` are one amount: the currency's minor units, as a string.

    Plain ASCII digits only (no sign, exponent, separators or other scripts); more places
    than the currency has (ISO 4217) is refused even when they are zeros (docs/design.md#demo).
    """
    currency = arguments.get("currency")
    if not isinstance(currency, str) or currency not in CURRENCY_MINOR_UNITS:
        raise ValueError(f"unsupported currency {currency!r}")
    places = CURRENCY_MINOR_UNITS[currency]
    if not isinstance(value, str) or not _AMOUNT.fullmatch(value):
        raise ValueError("must be a positive decimal string such as \"10.00\"")
    whole, _, fraction = value.partition(".")
    if len(fraction) > places:
        raise ValueError(f"{currency} has {places} minor units; {value!r} has more places")
    if Decimal(value) <= 0:
        raise ValueError("must be a positive amount")
    return f"{whole.lstrip('0') or '0'}{'.' if places else ''}{fraction.ljust(places, '0')}"


NORMALIZERS: Mapping[str, Any] = {"decimal_amount": _decimal_amount}
