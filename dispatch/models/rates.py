"""The per-principal request rate, one row per principal in the database every web worker
shares: its owner is `dispatch.services.rates`."""

from __future__ import annotations

from django.db import models


class RateWindow(models.Model):
    """The calls one principal made in the current fixed window of the rate's period
    (`window`, its number since the epoch) and in the one before it. Written only by
    `dispatch.services.rates`, by one conditional UPDATE per call."""

    key = models.CharField(max_length=200, primary_key=True)
    window = models.BigIntegerField(default=0)
    current = models.IntegerField(default=0)
    previous = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(current__gte=0, previous__gte=0),
                                   name="rate_window_counts_not_negative"),
        ]
