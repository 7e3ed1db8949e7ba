"""Priors, as a provider may declare them: a plan's expected speedup and cost before it
is built, and the operator mix of the model they are read for.

A provider may implement ``prior(context) -> Prior | None`` (optional, plugin API 2.1):
``context.operator_mix`` says where the model's reference call spends its time and
``context.target`` where it runs. ``None`` leaves the prior to dlopt (the user's own
evidence, then the table shipped with dlopt-core; :mod:`dlopt.selection.prior_table`).
"""

from __future__ import annotations

import math
from typing import Any

import attrs
from attrs import field, frozen


@frozen
class OperatorMix:
    """Where one reference call spends its time, as shares summing to 1: convolutions,
    linear layers (matmuls), attention, recurrent layers (LSTM, GRU, RNN), and everything
    else."""

    conv: float = 0.0
    linear: float = 0.0
    attention: float = 0.0
    other: float = 1.0
    #: The model has attention modules (their fused kernels may hide the share).
    has_attention: bool = False
    #: How many torch operators one reference call of the first case makes (0: not
    #: counted): the size of the graph an exporter or a compiler has to process, what a
    #: plan's build and first calls grow with.
    operator_calls: int = 0
    recurrent: float = 0.0

    @property
    def kind(self) -> str:
        """The mix a prior is keyed by: ``attention`` (a transformer), ``recurrent``,
        ``conv``, ``linear`` or ``other``."""
        if self.has_attention or self.attention >= 0.05:
            return "attention"
        if self.recurrent >= 0.2 and self.recurrent >= max(self.conv, self.linear):
            return "recurrent"
        if self.conv >= 0.2 and self.conv >= self.linear:
            return "conv"
        if self.linear >= 0.2:
            return "linear"
        return "other"

    def describe(self) -> str:
        size = f", {self.operator_calls} operator calls" if self.operator_calls else ""
        recurrent = f", recurrent {self.recurrent:.0%}" if self.recurrent else ""
        return (
            f"{self.kind} (conv {self.conv:.0%}, linear {self.linear:.0%}, attention "
            f"{self.attention:.0%}{recurrent}, other {self.other:.0%}{size})"
        )


def _positive(instance: object, attribute: Any, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"Prior.{attribute.name} must be a finite number > 0, got {value!r}")


def _fraction(instance: object, attribute: Any, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
        raise ValueError(f"Prior.{attribute.name} must be a number in [0, 1], got {value!r}")


def pass_rate(passed: int, failed: int) -> float:
    """The share of ``passed + failed`` judged models a plan passed validation on (1 when
    none was judged: nothing says it fails)."""
    judged = passed + failed
    return passed / judged if judged else 1.0


@frozen
class Prior:
    """A plan's expected speedup over eager fp32 (``speedup`` in ``[low, high]``), the
    seconds its build and first calls are expected to take, where that came from, and the
    share of such models it passed validation on (``pass_rate``: the speedup is of the
    ones it passed)."""

    speedup: float = field(validator=_positive)
    low: float = field(validator=_positive)
    high: float = field(validator=_positive)
    cost_s: float = field(validator=_positive)
    source: str = "no evidence"
    pass_rate: float = field(default=1.0, validator=_fraction)

    def __attrs_post_init__(self) -> None:
        if not self.low <= self.speedup <= self.high:
            raise ValueError(
                f"a prior's speedup {self.speedup:g} must lie in [low, high] = "
                f"[{self.low:g}, {self.high:g}]"
            )

    @property
    def value(self) -> float:
        """Expected gain per second of cost: the log speedup a second of building buys,
        times the chance the plan passes validation (a plan expected no faster than eager
        is worth nothing; one that fails gains nothing and spends its build)."""
        return self.pass_rate * math.log(max(self.speedup, 1.0)) / self.cost_s

    def describe(self) -> str:
        passes = f", passed {self.pass_rate:.0%}" if self.pass_rate < 1.0 else ""
        return (
            f"{self.speedup:.2f}x [{self.low:.2f}, {self.high:.2f}], ~{self.cost_s:.1f} s{passes}"
        )

    def scaled_cost(self, factor: float) -> Prior:
        """This prior with its cost times ``factor`` (what this machine's builds take)."""
        return attrs.evolve(self, cost_s=max(self.cost_s * factor, 1e-3))
