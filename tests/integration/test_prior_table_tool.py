"""``tools/tables.py priors``: the shipped prior table from the benchmark suite's results.

The tool is not part of an installed distribution; it is loaded from the checkout. The
documents below are the shape of the suite's ``results.json`` (one oracle and dlopt's
runs per workload), cut to the fields the table reads.
"""

from __future__ import annotations

import importlib.util
import json
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


def test_costs_come_only_from_the_runs_named_when_a_change_made_builds_cheaper(
    tables: ModuleType,
):
    # The older run exported with the slow exporter (6 s); the newer one after the change
    # (1.2 s). Read whole, the older run's cost would win; named, the newer one sets it,
    # and the speedups still pool both runs.
    plans = {"eager_fp32": 10.0, "int8": 4.0, "compiled": 8.0}
    older = _document(_workload("a", plans, [{"int8": 6.0, "compiled": 9.0}]))
    newer = _document(_workload("a", dict(plans, int8=5.0), [{"int8": 1.2}]))
    assert _entry(tables.prior_entries([older, newer]), "int8")["cost_s"] == pytest.approx(6.0)
    entries = tables.prior_entries([older, newer], costs_from={1})
    assert _entry(entries, "int8")["cost_s"] == pytest.approx(1.2)
    assert _entry(entries, "int8")["workloads"] == 2
    assert _entry(entries, "int8")["high"] == pytest.approx(2.5 * tables.WIDEN, abs=1e-3)
    # Not built in the named run (no time there): what the others measured still holds.
    assert _entry(entries, "compiled")["cost_s"] == pytest.approx(9.0)
    # Named for only the plans whose builds the change made cheaper: the others keep
    # every run's costs (a compile built once, with a warm cache, sets nothing alone).
    newer["results"][0]["dlopt"][0]["plan_costs_s"]["compiled"] = 0.3
    entries = tables.prior_entries([older, newer], costs_from={1}, costs_for=["int*"])
    assert _entry(entries, "int8")["cost_s"] == pytest.approx(1.2)
    assert _entry(entries, "compiled")["cost_s"] == pytest.approx(9.0)


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
    prior = table[("avx512_bf16", "conv", "int8")].prior
    assert prior.pass_rate == pytest.approx(1 / 3)
    assert prior.source.endswith("conv models, 1 workload(s), failed validation on 2 more")
    assert table[("avx512_bf16", "conv", "cl")].prior.pass_rate == 1.0


def _sized(workload: dict[str, Any], calls: int | None) -> dict[str, Any]:
    for run in workload["dlopt"]:
        run["operator_calls"] = calls
    return workload


def test_a_cost_grows_with_the_operator_calls_of_the_workloads_it_was_measured_on(
    tables: ModuleType,
):
    # A compile of 2 s on a 20-call model, 7 s on a 70-call one, ... 22 s on a 220-call
    # one grows 0.1 s a call; one cold outlier does not set the slope (the median of the
    # pairwise slopes). The entry says the sizes its cost was measured at.
    document = _document(
        _sized(_workload("a", {"eager_fp32": 10.0, "c": 5.0}, [{"c": 2.0}]), 20),
        _sized(_workload("f", {"eager_fp32": 10.0, "c": 5.0}, [{"c": 7.0}]), 70),
        _sized(_workload("b", {"eager_fp32": 10.0, "c": 5.0}, [{"c": 12.0}]), 120),
        _sized(_workload("d", {"eager_fp32": 10.0, "c": 5.0}, [{"c": 22.0}]), 220),
        _sized(_workload("e", {"eager_fp32": 10.0, "c": 5.0}, [{"c": 40.0}]), 230),
        _sized(_workload("u", {"eager_fp32": 10.0, "c": 5.0}, [{"c": 99.0}]), None),
    )
    entry = _entry(tables.prior_entries([document]), "c")
    assert entry["cost_per_operator_s"] == pytest.approx(0.1)
    assert entry["operator_calls"] == 120  # the median of 20, 70, 120, 220 and 230
    # a size the dlopt runs did not count comes from the suite's own table, else is unknown
    assert tables.workload_operator_calls({"key": "u", "dlopt": [{}]}) is None


def test_plans_that_share_an_export_grow_alike(tables: ModuleType):
    fp32, int8, _ = tables.SHARED_EXPORT_GROUPS[0]
    document = _document(
        _sized(_workload("a", {"eager_fp32": 10.0, fp32: 5.0, int8: 4.0}, [{int8: 1.0}]), 10),
        _sized(_workload("b", {"eager_fp32": 10.0, fp32: 5.0, int8: 4.0}, [{int8: 3.0}]), 110),
    )
    entries = tables.prior_entries([document])
    assert _entry(entries, int8)["cost_per_operator_s"] == pytest.approx(0.02)
    # fp32 was never built: it pays the export as the first plan of its group would
    assert _entry(entries, fp32)["cost_per_operator_s"] == pytest.approx(0.02)
    assert _entry(entries, fp32)["operator_calls"] == 60


def test_one_machine_class_is_regenerated_and_the_others_kept(
    tables: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    core = tmp_path / "packages" / "dlopt-core" / "src" / "dlopt"
    (core / "selection").mkdir(parents=True)
    kept = {"machine": "avx512_bf16", "mix": "conv", "plan": "old", "speedup": 1.0,
            "low": 1.0, "high": 1.0, "cost_s": 1.0, "workloads": 1}  # fmt: skip
    replaced = dict(kept, machine="avx2", plan="stale")
    shipped = {"format": 1, "from": ["before.json"], "entries": [kept, replaced]}
    (core / "selection" / "priors.json").write_text(json.dumps(shipped), encoding="utf-8")
    document = {
        "environment": {"isa_flags": ["avx2"]},
        "results": [_workload("a", {"eager_fp32": 10.0, "new": 5.0}, [{"new": 1.0}])],
    }
    results = tmp_path / "avx2.json"
    results.write_text(json.dumps(document), encoding="utf-8")
    monkeypatch.setattr(tables, "CORE", core)
    written = json.loads(tables.priors([results], machines=["avx2"]).read_text(encoding="utf-8"))
    assert [(e["machine"], e["plan"]) for e in written["entries"]] == [
        ("avx2", "eager_fp32"),
        ("avx2", "new"),
        ("avx512_bf16", "old"),
    ]
    assert written["from"] == ["before.json", "avx2.json"]


def test_the_runs_named_for_costs_are_read_beside_the_others(
    tables: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    core = tmp_path / "packages" / "dlopt-core" / "src" / "dlopt"
    (core / "selection").mkdir(parents=True)
    shipped = {"format": 1, "from": [], "entries": []}
    (core / "selection" / "priors.json").write_text(json.dumps(shipped), encoding="utf-8")
    monkeypatch.setattr(tables, "CORE", core)
    files = {}
    for name, ms, cost in (("older", 4.0, 6.0), ("newer", 5.0, 1.2)):
        document = {
            "environment": {"isa_flags": ["avx2"]},
            "results": [_workload("a", {"eager_fp32": 10.0, "int8": ms}, [{"int8": cost}])],
        }
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(document), encoding="utf-8")
    path = tables.priors([files["older"]], machines=["avx2"], costs_from=[files["newer"]])
    written = json.loads(path.read_text(encoding="utf-8"))
    (entry,) = [e for e in written["entries"] if e["plan"] == "int8"]
    assert entry["cost_s"] == pytest.approx(1.2) and entry["workloads"] == 2
    assert written["from"] == ["older.json", "newer.json"]


def test_costs_named_from_a_missing_file_or_for_no_results_are_refused(
    tables: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    # Were the refusal gone, the table would be written here, not over the shipped one.
    monkeypatch.setattr(tables, "CORE", tmp_path / "packages" / "dlopt-core" / "src" / "dlopt")
    missing = tmp_path / "nowhere.json"
    with pytest.raises(SystemExit) as exit_info:
        tables.main(["priors", "--costs-from", str(missing)])
    assert exit_info.value.code == 2
    assert f"--costs-from: no such results file: {missing}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tables.main(["priors", "--costs-for", "onnxruntime_*"])
    assert "add it" in capsys.readouterr().err


def test_the_shared_miss_is_the_slope_of_one_plans_miss_of_its_prior_on_anothers(
    tables: ModuleType,
):
    machine = tables.machine_class_of(AVX512_BF16)
    table = {(machine, "conv", "a"): 2.0, (machine, "conv", "b"): 3.0}
    # On the first model both plans run twice their prior's speedup, on the second half:
    # each plan's miss is the other's.
    shared = _document(
        _workload("fast_model", {"eager_fp32": 12.0, "a": 3.0, "b": 2.0}, []),
        _workload("slow_model", {"eager_fp32": 12.0, "a": 12.0, "b": 8.0}, []),
    )
    fit = tables.shared_miss([shared], table)["conv"]
    assert fit["pairs"] == 4 and fit["slope"] == pytest.approx(1.0)
    assert fit["rms_log_miss"] == pytest.approx(0.693, abs=1e-3) and fit["rms_after"] == 0.0

    # Here the second plan misses the other way: the first's miss predicts the opposite.
    opposed = _document(
        _workload("fast_model", {"eager_fp32": 12.0, "a": 3.0, "b": 8.0}, []),
        _workload("slow_model", {"eager_fp32": 12.0, "a": 12.0, "b": 2.0}, []),
    )
    assert tables.shared_miss([opposed], table)["conv"]["slope"] == pytest.approx(-1.0)
