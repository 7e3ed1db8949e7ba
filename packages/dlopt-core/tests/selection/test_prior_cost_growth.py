"""A prior's cost grows with the model: the torch operator calls one reference call makes,
and the shipped table's growth per call (``dlopt.selection.prior_table.TableEntry``).

Exporters and compilers take longer on a larger graph: an entry measured on small models
must not promise a large model their cost.
"""

from __future__ import annotations

import pytest
import torch

from dlopt.contract.priors import Prior
from dlopt.pipeline.ground_truth import count_operator_calls
from dlopt.platform.machine import machine_class
from dlopt.selection import prior_table
from dlopt.selection.prior_table import TableEntry, table_from_json
from dlopt.testing.fake_race import FakeRace
from dlopt.vocabulary import Status

X = torch.randn(4, 16)


def _stack(layers: int) -> torch.nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(16, 16), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks).eval()


def test_the_operator_calls_grow_with_the_model():
    with torch.inference_mode():
        small = count_operator_calls(_stack(1), (X,), {})
        large = count_operator_calls(_stack(8), (X,), {})
    assert small >= 2  # a linear layer and a relu at least
    assert large >= 8 * small - 8  # each block makes the calls the first one did


def test_a_model_whose_call_fails_counts_nothing():
    def broken(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("no")

    class Broken(torch.nn.Module):
        forward = staticmethod(broken)

    assert count_operator_calls(Broken(), (X,), {}) == 0


def _entry(cost_s: float, calls: int, per_call_s: float) -> TableEntry:
    return TableEntry(Prior(2.0, 1.5, 3.0, cost_s, "table"), calls, per_call_s)


def test_a_table_cost_grows_beyond_the_size_it_was_measured_at_and_never_shrinks():
    entry = _entry(2.5, 40, 0.1)
    assert entry.for_model(160).cost_s == pytest.approx(2.5 + 120 * 0.1)
    assert "cost for 160 operator calls (measured at 40)" in entry.for_model(160).source
    assert entry.for_model(10).cost_s == 2.5  # a small model still pays the fixed work
    assert entry.for_model(0).cost_s == 2.5  # not counted
    assert _entry(2.5, 40, 0.0).for_model(4000).cost_s == 2.5  # no growth measured
    # speedup, interval and pass rate are the entry's own
    grown = entry.for_model(160)
    assert (grown.speedup, grown.low, grown.high) == (2.0, 1.5, 3.0)


def test_the_table_reads_the_growth_and_an_entry_without_it_does_not_grow():
    table = table_from_json(
        {
            "format": 1,
            "entries": [
                {"machine": "m", "mix": "conv", "plan": "grows", "speedup": 2.0, "low": 1.0,
                 "high": 3.0, "cost_s": 2.0, "workloads": 3, "operator_calls": 50,
                 "cost_per_operator_s": 0.05},
                {"machine": "m", "mix": "conv", "plan": "older", "speedup": 2.0, "low": 1.0,
                 "high": 3.0, "cost_s": 2.0, "workloads": 3},
            ],
        }
    )  # fmt: skip
    assert table["m", "conv", "grows"].for_model(250).cost_s == pytest.approx(12.0)
    assert table["m", "conv", "older"].for_model(250).cost_s == 2.0


def test_the_shipped_table_reads_every_entry():
    table = prior_table.shipped_table()
    assert table
    for (machine, mix, plan), entry in table.items():
        assert entry.operator_calls >= 0 and entry.cost_per_operator_s >= 0, (machine, mix, plan)
        assert entry.for_model(10**4).cost_s >= entry.prior.cost_s


@pytest.mark.parametrize("per_call_s", [0.0, 10.0])
def test_a_compile_priced_for_the_models_size_is_left_out_of_a_budget_it_cannot_fit(
    monkeypatch, per_call_s
):
    # The table says 1 s for the compile, measured on a model of one operator call; four
    # linear blocks make more. Growing 10 s a call, it cannot fit a 10 s budget.
    machine = machine_class("cpu")
    entry = _entry(1.0, 1, per_call_s)
    monkeypatch.setattr(
        prior_table, "shipped_table", lambda: {(machine, "linear", "compile"): entry}
    )
    # A cheap plan is built first: until one challenger's build shows what builds take
    # here, no prior's cost is trusted to skip a build.
    race = FakeRace()
    cheap = race.fake("cheap", 2e-3, setup_time_s=0.05, declared_prior=Prior(1.2, 1.1, 1.3, 0.05))
    compile_plan = race.fake("compile", 1e-3, setup_time_s=1.0)
    eager = race.fake("eager_fp32", 3e-3)
    report = (
        race.optimizer(eager, cheap, compile_plan, time_budget_s=10.0)
        .select_signature(_stack(4), X)
        .report
    )
    assert cheap.builds == 1
    calls = report.decision_time.operator_mix.operator_calls
    assert calls >= 8  # the report says how large the model is
    row = report.candidate("compile")
    if per_call_s:
        assert compile_plan.builds == 0 and row.status is Status.NOT_BUILT
        assert row.not_built.startswith("no time left")
        assert row.prior.cost_s == pytest.approx(1.0 + (calls - 1) * per_call_s)
        assert f"cost for {calls} operator calls (measured at 1)" in row.prior.source
    else:
        assert compile_plan.builds == 1 and row.prior.cost_s == 1.0


@pytest.mark.parametrize("growth", [float("nan"), float("inf"), -0.5])
def test_a_table_entry_whose_growth_is_no_number_of_seconds_is_refused_when_read(growth):
    # Read later, it would fail the selection of whichever model grows the cost.
    entry = {"machine": "m", "mix": "conv", "plan": "p", "speedup": 2.0, "low": 1.0,
             "high": 3.0, "cost_s": 2.0, "workloads": 3, "operator_calls": 50,
             "cost_per_operator_s": growth}  # fmt: skip
    with pytest.raises(ValueError, match="cost_per_operator_s must be a finite number >= 0"):
        table_from_json({"format": 1, "entries": [entry]})
