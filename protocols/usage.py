"""Model usage as an adapter reports it (docs/design.md#budgets): pure data, summed per
execution."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation


@dataclass(frozen=True)
class Usage:
    """What one model turn cost, as the adapter reports it (docs/design.md#budgets): accounting,
    kept in the transcript and summed per execution. `cost` is a decimal string in the provider's
    unit."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: str = "0"

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens"):
            count = getattr(self, name)
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"usage {name} must be a whole number >= 0, not {count!r}")
        try:
            cost = Decimal(self.cost)
        except (InvalidOperation, TypeError):
            raise ValueError(f"usage cost must be a decimal string, not {self.cost!r}") from None
        if not cost.is_finite() or cost < 0:
            raise ValueError(f"usage cost must be >= 0, not {self.cost!r}")

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens
