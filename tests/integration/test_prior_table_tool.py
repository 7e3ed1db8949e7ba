"""``tools/tables.py priors``: the shipped prior table from the benchmark suite's results.

The tool is not part of an installed distribution; it is loaded from the checkout. The
documents below are the shape of the suite's ``results.json`` (one oracle and dlopt's
runs per workload), cut to the fields the table reads.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "tables.py"
AVX512_BF16 = ["avx2", "avx512f", "avx512_vnni", "avx512_bf16"]


@pytest.fixture(scope="module")
def tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dlopt_tables_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _workload(
    key: str,
    plan_ms: dict[str, float],
    dlopt_costs: list[dict[str, float]],
    budget_costs: list[dict[str, float]] | None = None,
    mix: str = "conv",
) -> dict[str, Any]:
    return {
        "key": key,
        "operator_mix": mix,
        "oracle": {"plans": [{"name": n, "median_ms": ms} for n, ms in plan_ms.items()]},
        "dlopt": [{"plan_costs_s": costs} for costs in dlopt_costs],
        "budget": [{"plan_costs_s": costs} for costs in budget_costs or []],
    }


def _document(*workloads: dict[str, Any]) -> dict[str, Any]:
    return {"environment": {"isa_flags": AVX512_BF16}, "results": list(workloads)}


def _entry(entries: list[dict[str, Any]], plan: str) -> dict[str, Any]:
    (entry,) = [e for e in entries if e["plan"] == plan and e["mix"] == "conv"]
    return entry


def test_a_plan_built_cheaply_in_one_run_costs_what_the_full_path_took(tables: ModuleType):
    # One run built the int8 plan after another plan of its distribution (export reused:
    # 0.2 s); a later run built it first (the export paid: 4-6 s). The prior must promise
    # the full path, or the scheduler puts the plan first and overruns what it counted.
    newer = _document(
        _workload("a", {"eager_fp32": 10.0, "int8": 4.0}, [{"int8": 4.0}, {"int8": 4.4}]),
        _workload("b", {"eager_fp32": 10.0, "int8": 5.0}, [{"int8": 6.0}]),
    )
    older = _document(
        _workload("a", {"eager_fp32": 10.0, "int8": 4.0}, [{"int8": 0.2}]),
        _workload("b", {"eager_fp32": 10.0, "int8": 5.0}, [{"int8": 0.3}]),
        _workload("c", {"eager_fp32": 10.0, "int8": 5.0}, [{"int8": 0.1}]),
    )
    for order in ([newer, older], [older, newer]):
        entry = _entry(tables.prior_entries(order), "int8")
        # each workload's slowest run (4.4 s, 6.0 s), the median over the workloads: 5.2 s
        assert entry["cost_s"] == pytest.approx(5.2)
        # speedups pool every document: 2.5x, 2x, 2.5x, 2x, 2x
        assert entry["workloads"] == 5
        assert entry["low"] == pytest.approx(2.0 / tables.WIDEN, abs=1e-3)
        assert entry["high"] == pytest.approx(2.5 * tables.WIDEN, abs=1e-3)


def test_budget_runs_count_toward_a_cost_and_an_unbuilt_plan_costs_the_slowest_elsewhere(
    tables: ModuleType,
):
    document = _document(
        _workload(
            "a",
            {"eager_fp32": 10.0, "pt2e": 4.0, "compiled": 8.0, "never_built": 9.0},
            [{"eager_fp32": 0.1}],
            budget_costs=[{"pt2e": 13.0}],
        ),
        _workload("b", {"eager_fp32": 10.0, "compiled": 8.0}, [{"compiled": 7.0}], mix="linear"),
    )
    entries = tables.prior_entries([document])
    assert _entry(entries, "pt2e")["cost_s"] == pytest.approx(13.0)
    assert _entry(entries, "eager_fp32")["cost_s"] == pytest.approx(0.1)
    # not built on the conv workload: what it took on the linear one
    assert _entry(entries, "compiled")["cost_s"] == pytest.approx(7.0)
    assert _entry(entries, "never_built")["cost_s"] == pytest.approx(tables.UNKNOWN_COST_S)


def test_plans_that_share_an_export_cost_what_their_costliest_plan_does(tables: ModuleType):
    # The fp32 plan only ever came after the int8 one, reusing its export (0.05 s): built
    # first it would pay the export, so it is priced as the group's costliest plan.
    fp32, int8, static = tables.SHARED_EXPORT_GROUPS[0]
    document = _document(
        _workload(
            "a",
            {"eager_fp32": 10.0, fp32: 5.0, int8: 4.0, "inductor": 8.0},
            [{fp32: 0.05, int8: 4.5, "inductor": 3.0}],
        ),
        _workload("b", {"eager_fp32": 10.0, fp32: 5.0}, [{fp32: 9.0}], mix="linear"),
    )
    entries = tables.prior_entries([document])
    assert _entry(entries, fp32)["cost_s"] == pytest.approx(4.5)
    assert _entry(entries, int8)["cost_s"] == pytest.approx(4.5)
    assert not [e for e in entries if e["plan"] == static]  # not timed: no entry
    assert _entry(entries, "inductor")["cost_s"] == pytest.approx(3.0)  # no group
    # groups are per machine class and mix: the linear workload's 9 s stays there
    (linear,) = [e for e in entries if e["plan"] == fp32 and e["mix"] == "linear"]
    assert linear["cost_s"] == pytest.approx(9.0)


def test_a_groups_cost_is_set_by_what_was_measured_there(tables: ModuleType):
    # fp32 was never built on the conv workload: its 9 s from the linear one does not
    # raise the conv group's cost, measured at 4 s by the int8 plan.
    fp32, int8, _ = tables.SHARED_EXPORT_GROUPS[0]
    document = _document(
        _workload("a", {"eager_fp32": 10.0, fp32: 5.0, int8: 4.0}, [{int8: 4.0}]),
        _workload("b", {"eager_fp32": 10.0, fp32: 5.0}, [{fp32: 9.0}], mix="linear"),
    )
    entries = tables.prior_entries([document])
    assert _entry(entries, int8)["cost_s"] == pytest.approx(4.0)
    assert _entry(entries, fp32)["cost_s"] == pytest.approx(4.0)


def test_a_plan_counts_the_workloads_it_failed_validation_on(tables: ModuleType):
    # int8 passed on "a" and failed the int8 limits on "b" (the oracle's failure) and "c"
    # (built by a dlopt run, never validated); the channels-last plan does not apply to
    # "b" (not a validation failure: it fails fast).
    limits = "RuntimeError: case 'b', output out: rel_l2 0.2 > limit 0.08 (int8 limits)"
    not_applicable = "RuntimeError: channels-last needs 4-D or 5-D floating inputs"
    passed_a = _workload("a", {"eager_fp32": 10.0, "int8": 4.0, "cl": 8.0}, [{"int8": 2.0}])
    passed_a["dlopt"][0]["valid_plans"] = ["eager_fp32", "int8"]
    failed_b = _workload("b", {"eager_fp32": 10.0}, [{}])
    failed_b["oracle"]["failures"] = {"int8": limits, "cl": not_applicable}
    failed_c = _workload("c", {"eager_fp32": 10.0}, [{"eager_fp32": 0.1, "int8": 3.0}])
    failed_c["dlopt"][0]["valid_plans"] = ["eager_fp32"]
    entries = tables.prior_entries([_document(passed_a, failed_b, failed_c)])
    int8 = _entry(entries, "int8")
    assert (int8["workloads"], int8["failed"]) == (1, 2)
    cl = _entry(entries, "cl")
    assert (cl["workloads"], cl["failed"]) == (1, 0)
    assert _entry(entries, "eager_fp32")["failed"] == 0

    # The prior read from such an entry passes a third of the time, and says so.
    from dlopt.selection.prior_table import TABLE_FORMAT, table_from_json

    table = table_from_json({"format": TABLE_FORMAT, "entries": entries})
    prior = table[("avx512_bf16", "conv", "int8")]
    assert prior.pass_rate == pytest.approx(1 / 3)
    assert prior.source.endswith("conv models, 1 workload(s), failed validation on 2 more")
    assert table[("avx512_bf16", "conv", "cl")].pass_rate == 1.0
