"""The shipped prior table, and where a plan's prior comes from.

A :class:`Prior` is an estimated speedup over eager fp32 with an interval, and an
estimated cost: the seconds its build and first calls take. The selection builds plans
in descending order of expected gain per second of cost, and does not build a plan
whose optimistic bound cannot beat the confirmed leader (docs/selection.md, "Decision
time").

Where a prior comes from, the first that knows wins:

1. the provider itself (an optional ``prior(context)`` method: a vendor knows its SDK);
2. the user's own evidence: plan cache records of other selections on this machine class,
   for a model of the same operator mix (:mod:`dlopt.cache.user_priors`);
3. the table shipped with dlopt-core (``priors.json`` beside this module), keyed by the
   machine class (:func:`dlopt.platform.machine.machine_class`), the operator mix's kind
   and the plan, regenerated from the benchmark suite's results by
   ``python tools/tables.py priors``: an entry's ``workloads`` are those the plan passed
   validation on (its speedup is theirs), ``failed`` those it failed on (its pass rate);
   its cost grows with the model's operator calls (:class:`TableEntry`): exporters and
   compilers take longer on a larger graph (``fx_inductor`` took 10-26 s on the suite's
   ImageNet models, where a conv entry measured on the demo conv nets says 2.5 s);
4. nothing known: a wide interval that prunes nothing, at a cost that puts the plan after
   those whose value is known.

Pure data and arithmetic: no torch here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import attrs

from dlopt.contract.priors import OperatorMix, Prior, pass_rate
from dlopt.platform.config_checks import integer, number
from dlopt.platform.serialization import parse_strict_json

#: The shipped table's file, beside this module.
TABLE_FILE = "priors.json"
#: The layout of the table; a table of another layout is not read.
TABLE_FORMAT = 1
#: Speedups a prior claims nothing beyond: unknown plans get this interval.
UNKNOWN_LOW = 0.25
UNKNOWN_HIGH = 8.0
#: Build and first-call seconds assumed for a plan nothing is known of (a typical
#: export or compile on a small model: such a plan still fits a modest budget).
UNKNOWN_COST_S = 3.0
#: The source of the prior of a plan nothing is known of.
UNKNOWN_SOURCE = "no evidence"


def unknown_prior(cost_s: float = UNKNOWN_COST_S) -> Prior:
    """The prior of a plan nothing is known of: it prunes nothing."""
    return Prior(1.0, UNKNOWN_LOW, UNKNOWN_HIGH, cost_s, UNKNOWN_SOURCE)


@attrs.frozen
class TableEntry:
    """One plan's prior on one machine class and mix, and how its cost grows with the
    model: ``cost_s`` (the prior's) was measured on models of about ``operator_calls``
    torch operator calls per reference call, and each call more costs
    ``cost_per_operator_s`` (0 and 0: the cost does not grow)."""

    prior: Prior
    # Checked when the table is read: a NaN growth would otherwise fail the selection
    # that reads the entry for its model.
    operator_calls: int = attrs.field(default=0, validator=integer(minimum=0, error=ValueError))
    cost_per_operator_s: float = attrs.field(
        default=0.0, validator=number(minimum=0, error=ValueError)
    )

    def for_model(self, operator_calls: int) -> Prior:
        """The prior for a model of ``operator_calls`` (0: not counted): its cost grown by
        the calls beyond those it was measured at, never shrunk (a small model still pays
        the imports and the exporter's fixed work)."""
        extra = operator_calls - self.operator_calls
        if operator_calls <= 0 or self.cost_per_operator_s <= 0 or extra <= 0:
            return self.prior
        cost_s = self.prior.cost_s + extra * self.cost_per_operator_s
        if not math.isfinite(cost_s):  # a count or a growth beyond any real build
            return self.prior
        source = (
            f"{self.prior.source}; cost for {operator_calls} operator calls "
            f"(measured at {self.operator_calls})"
        )
        return attrs.evolve(self.prior, cost_s=cost_s, source=source)


@lru_cache(maxsize=1)
def shipped_table() -> dict[tuple[str, str, str], TableEntry]:
    """``(machine class, mix kind, plan) -> TableEntry`` of the shipped table (empty when
    it cannot be read)."""
    from importlib.resources import files

    try:
        text = files("dlopt.selection").joinpath(TABLE_FILE).read_text("utf-8")
        return table_from_json(parse_strict_json(text))
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def table_from_json(data: Mapping[str, Any]) -> dict[tuple[str, str, str], TableEntry]:
    """A prior table from its JSON form (``ValueError`` on another layout)."""
    if data.get("format") != TABLE_FORMAT:
        raise ValueError(f"a prior table of format {data.get('format')!r}, not {TABLE_FORMAT}")
    table = {}
    for entry in data["entries"]:
        key = (str(entry["machine"]), str(entry["mix"]), str(entry["plan"]))
        passed, failed = int(entry["workloads"]), int(entry.get("failed", 0))
        source = f"table: {key[0]}, {key[1]} models, {passed} workload(s)"
        if failed:
            source += f", failed validation on {failed} more"
        prior = Prior(
            float(entry["speedup"]),
            float(entry["low"]),
            float(entry["high"]),
            float(entry["cost_s"]),
            source,
            pass_rate=pass_rate(passed, failed),
        )
        table[key] = TableEntry(
            prior,
            operator_calls=int(entry.get("operator_calls", 0)),
            cost_per_operator_s=float(entry.get("cost_per_operator_s", 0.0)),
        )
    return table


def table_prior(machine: str, mix: OperatorMix, plan: str) -> Prior | None:
    """The shipped table's prior for ``plan`` on this machine class, for a model of this
    operator mix (its kind picks the entry, its operator calls grow the cost), if any."""
    entry = shipped_table().get((machine, mix.kind, plan))
    return entry.for_model(mix.operator_calls) if entry is not None else None
