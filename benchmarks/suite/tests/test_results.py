"""Regret, stability, targets and the table, on hand-made records."""

from __future__ import annotations

import json

import attrs
import pytest

from benchmarks.suite.results import (
    CONVERTER,
    DecisionRun,
    Interval,
    ModelResult,
    OraclePlan,
    OracleResult,
    evaluate_targets,
    markdown,
    model_result_from_json,
    regret,
    stability,
    summarize,
    to_json_data,
)
from benchmarks.suite.timing import OracleSettings, time_interleaved


def oracle(**latencies: float) -> OracleResult:
    plans = tuple(
        OraclePlan(name, ms, ms * 0.99, ms * 1.01, "independent") for name, ms in latencies.items()
    )
    return OracleResult(plans=plans, rounds=30, time_s=10.0, settled=True, stop_reason="settled")


def dlopt_run(pick: str, wall: float = 10.0, valid=("eager_fp32", "fx", "inductor")) -> DecisionRun:
    return DecisionRun(
        "dlopt",
        pick,
        pick,
        wall_s=wall,
        measure_s=3.0,
        timed_calls=400,
        pick_speedup=Interval(1.5, 1.4, 1.6),
        valid_plans=valid,
    )


def peer_run(pick: str, oracle_name: str, wall: float = 5.0) -> DecisionRun:
    return DecisionRun("peer", pick, oracle_name, wall_s=wall, timed_calls=180)


def paired(ms: float, vs: float | None, low: float = 0.0, high: float = 0.0, name: str = "p"):
    return OraclePlan(
        name, ms, ms * 0.9, ms * 1.1, "provider", {}, 17, None, None, vs, vs and low, vs and high
    )


def test_regret_speedup_and_gap_come_from_the_paired_ratios():
    # mobilenet_v2 as timed: medians 11% apart over 17 rounds of a machine with slow
    # spells, round by round 1.6% apart.
    o = OracleResult(
        plans=(
            paired(32.433, None, name="onnxruntime_cpu_int8"),
            paired(36.039, 1.016, 1.001, 1.043, name="onnxruntime_cpu"),
            paired(123.898, 3.372, 3.192, 3.578, name="eager_fp32"),
        ),
        rounds=17,
        settled=True,
    )
    valid = ("onnxruntime_cpu_int8", "onnxruntime_cpu", "eager_fp32")
    assert o.relative("onnxruntime_cpu_int8") == 1.0
    assert regret(o, "onnxruntime_cpu", valid) == pytest.approx(0.016)
    assert o.top_two_gap(valid) == pytest.approx(0.016)
    # The fastest valid plan need not be the leader: ratios are taken through it.
    assert regret(o, "eager_fp32", ("onnxruntime_cpu", "eager_fp32")) == pytest.approx(
        3.372 / 1.016 - 1
    )
    result = ModelResult("m", "M", dlopt=(dlopt_run("onnxruntime_cpu", valid=valid),), oracle=o)
    summary = summarize(result)
    assert summary.pick_speedup_vs_eager == pytest.approx(3.372 / 1.016)
    assert summary.best_plan == "onnxruntime_cpu_int8"
    page = markdown([summary], [], {}, {"m": o})
    rows = [line for line in page.splitlines() if line.startswith("| onnxruntime_cpu")]
    assert rows[0].startswith("| onnxruntime_cpu_int8 |")  # ordered by the paired ratios


def test_regret_is_against_the_fastest_validated_plan():
    o = oracle(eager_fp32=2.0, fx=1.1, inductor=1.0, peer_fx=0.5)
    valid = ("eager_fp32", "fx", "inductor")
    assert regret(o, "inductor", valid) == pytest.approx(0.0)
    assert regret(o, "fx", valid) == pytest.approx(0.1)
    assert regret(o, "eager_fp32", valid) == pytest.approx(1.0)
    # The peer's own rewrite is timed for the peer's regret, not a plan dlopt could pick.
    assert regret(o, "peer_fx", valid) == pytest.approx(-0.5)
    assert regret(o, "not_timed", valid) is None
    assert regret(None, "fx", valid) is None


def test_weighted_regret_follows_traffic_from_the_oracle_timing():
    """batch-1 at 70%: a plan faster at batch 8 but slower at batch 1 loses."""
    now = [0.0]

    def plan(ms: float):
        def call() -> None:
            now[0] += ms / 1e3

        return call

    plans = {
        "a": {"b1": plan(1.0), "b8": plan(6.0)},  # weighted 0.7 + 1.8 = 2.5
        "b": {"b1": plan(1.5), "b8": plan(4.0)},  # weighted 1.05 + 1.2 = 2.25
    }
    timing = time_interleaved(
        plans,
        {"b1": 70, "b8": 30},
        OracleSettings(min_rounds=3, max_rounds=3),
        clock=lambda: now[0],
    )
    o = OracleResult(
        plans=tuple(
            OraclePlan(t.name, t.latency.median, t.latency.low, t.latency.high, "independent")
            for t in timing.plans
        )
    )
    assert regret(o, "a", ("a", "b")) == pytest.approx(2.5 / 2.25 - 1)


def test_stability_counts_the_most_common_pick():
    assert stability(["fx", "fx", "inductor"]) == ("fx", 2, 3)
    assert stability([None, None]) == (None, 0, 2)
    assert stability(["fx", None, "fx"]) == ("fx", 2, 3)


def test_summary_row():
    result = ModelResult(
        "mlp",
        "MLP",
        dlopt=(dlopt_run("inductor", 12.0), dlopt_run("inductor", 10.0), dlopt_run("fx", 11.0)),
        peer=(peer_run("native", "eager_fp32", 4.0), peer_run("fx", "peer_fx", 5.0)),
        oracle=oracle(eager_fp32=2.0, fx=1.1, inductor=1.0, peer_fx=1.2),
    )
    s = summarize(result)
    assert (s.dlopt_pick, s.dlopt_stable, s.runs) == ("inductor", 2, 3)
    assert s.dlopt_regrets == pytest.approx((0.0, 0.0, 0.1))
    assert s.peer_regrets == pytest.approx((1.0, 0.2))
    assert s.dlopt_wall_s == 11.0 and s.peer_wall_s == 4.5
    assert s.wall_ratio == pytest.approx(11.0 / 4.5)
    assert s.pick_speedup_vs_eager == pytest.approx(2.0)
    assert (s.best_plan, s.best_built) == ("inductor", "independent")
    assert s.top_two_gap == pytest.approx(0.1)
    assert s.error is None


def test_targets_met_and_not_met():
    good = summarize(
        ModelResult(
            "a",
            "A",
            dlopt=(dlopt_run("inductor", 3.0),) * 3,
            peer=(peer_run("fx", "peer_fx", 5.0),),
            oracle=oracle(inductor=1.0, fx=1.2, peer_fx=1.3),
        )
    )
    bad = summarize(
        ModelResult(
            "b",
            "B",
            dlopt=(dlopt_run("fx", 9.0), dlopt_run("inductor", 9.0), dlopt_run("fx", 9.0)),
            peer=(peer_run("fx", "peer_fx", 5.0),),
            oracle=oracle(inductor=1.0, fx=1.2, peer_fx=1.3),
        )
    )
    by_name = {t.name: t for t in evaluate_targets([good])}
    assert by_name["median regret <= 2%"].met is True
    assert by_name["max regret <= 5%"].met is True
    assert by_name["same pick in every run where the oracle's top two differ by > 5%"].met is True
    # One workload ran, so one win of one is enough.
    assert by_name["wall time <= the peer's on >= 4 of 8 workloads"].met is True
    by_name = {t.name: t for t in evaluate_targets([good, bad])}
    assert by_name["median regret <= 2%"].met is True  # 0,0,0,0,20%,20%: median 0
    assert by_name["max regret <= 5%"].met is False
    stable = by_name["same pick in every run where the oracle's top two differ by > 5%"]
    assert stable.met is False and "b" in stable.detail
    wall = by_name["wall time <= the peer's on >= 4 of 8 workloads"]
    assert wall.met is False and "on 1 of 2 workloads" in wall.detail


def test_stability_is_not_judged_where_the_top_two_are_close():
    close = summarize(
        ModelResult(
            "c",
            "C",
            dlopt=(dlopt_run("fx"), dlopt_run("inductor")),
            oracle=oracle(inductor=1.0, fx=1.03),
        )
    )
    (stable,) = [t for t in evaluate_targets([close]) if t.name.startswith("same pick")]
    assert stable.met is None


def test_targets_without_data_are_not_judged():
    failed = summarize(ModelResult("x", "X", error="torchvision is not installed"))
    outcomes = evaluate_targets([failed])
    assert all(t.met is None for t in outcomes)


def test_markdown_has_a_row_per_workload_failures_and_targets():
    ok = ModelResult(
        "mlp",
        "MLP b32",
        dlopt=(dlopt_run("inductor", 12.0),),
        peer=(peer_run("native", "eager_fp32", 5.0),),
        oracle=oracle(eager_fp32=2.0, inductor=1.0),
    )
    failed = ModelResult(
        "resnet50",
        "resnet50 b1",
        dlopt=(DecisionRun("dlopt", error="exit 1: ModuleNotFoundError: torchvision"),),
        oracle=None,
        error="every dlopt run failed",
    )
    summaries = [summarize(ok), summarize(failed)]
    page = markdown(
        summaries,
        evaluate_targets(summaries),
        {"cpu_model": "Test CPU", "isa_flags": ["avx2"], "quick": True},
        {"mlp": ok.oracle, "resnet50": None},
    )
    assert "| MLP b32 | inductor (1/1) |" in page
    assert "| resnet50 b1 | failed: every dlopt run failed" in page
    assert "ModuleNotFoundError: torchvision" in page
    assert "Test CPU" in page and "avx2" in page and "quick mode" in page
    assert "| 2.40x |" in page  # dlopt's wall time / the peer's
    assert "| 2.00x |" in page  # the pick's speedup over eager (oracle)
    assert "- median regret <= 2%: **met**" in page
    # A header and separator with the same number of columns as the rows.
    table = [line for line in page.splitlines() if line.startswith("| MLP b32")]
    header = next(line for line in page.splitlines() if line.startswith("| workload"))
    assert table[0].count("|") == header.count("|")


def test_records_round_trip_through_strict_json():
    result = ModelResult(
        "mlp",
        "MLP",
        dlopt=(dlopt_run("fx"),),
        peer=(peer_run("fx", "peer_fx"),),
        oracle=oracle(fx=1.0, peer_fx=1.1),
    )
    text = json.dumps(to_json_data(result), allow_nan=False)
    assert model_result_from_json(json.loads(text)) == result
    assert CONVERTER.structure(to_json_data(result.dlopt[0]), DecisionRun) == result.dlopt[0]


def test_the_oracle_section_lists_rounds_early_leavers_and_failures():
    o = OracleResult(
        plans=(
            OraclePlan("inductor", 1.0, 0.98, 1.02, "independent", rounds=30),
            OraclePlan(
                "torchao_int4_weight_only",
                90.0,
                88.0,
                95.0,
                "provider",
                {},
                3,
                3,
                "> 2x the leader",
                88.0,
                86.0,
                93.0,
            ),
            OraclePlan(
                "fx",
                1.2,
                1.18,
                1.23,
                "provider",
                {},
                15,
                15,
                "settled slower than the leader",
                1.19,
                1.17,
                1.21,
            ),
        ),
        rounds=30,
        time_s=40.0,
        settled=True,
        stop_reason="settled",
        failures={"onnxruntime_cpu": "RuntimeError: export failed"},
    )
    result = ModelResult("m", "M", dlopt=(dlopt_run("inductor"),), oracle=o)
    page = markdown([summarize(result)], [], {}, {"m": o})
    assert "### M: 30 rounds, 40 s, settled" in page
    assert "| inductor | 1.000 | 0.980-1.020 | - | 30 | independent |" in page
    assert "| 88.000x [86.000, 93.000] | 3 (left: > 2x the leader) | provider |" in page
    assert "| 1.190x [1.170, 1.210] | 15 (left: settled slower than the leader) |" in page
    assert "| onnxruntime_cpu | - | not timed: RuntimeError: export failed |" in page


def test_wall_time_anatomy_uses_the_median_run_and_lists_the_costliest_plans():
    def timed(wall: float, costs: dict[str, float]) -> DecisionRun:
        return DecisionRun(
            "dlopt",
            "inductor",
            "inductor",
            wall_s=wall,
            measure_s=3.0,
            build_s=1.0,
            first_calls_s=wall - 6.0,
            plan_costs_s=costs,
        )

    runs = (
        timed(30.0, {"slowest_run": 99.0}),
        timed(20.0, {"fx": 0.5, "inductor": 12.0, "inductor_freezing": 6.0, "eager": 0.1}),
        timed(10.0, {"fastest_run": 1.0}),
    )
    repeat = DecisionRun("dlopt-repeat", "inductor", "inductor", wall_s=4.5, cache_hit=True)
    result = ModelResult(
        "m", "Model", dlopt=runs, peer=(peer_run("native", "eager_fp32"),), repeat=repeat
    )
    summary = summarize(result)
    assert summary.dlopt_build_s == 1.0
    assert summary.dlopt_first_calls_s == 14.0
    assert summary.dlopt_other_s == pytest.approx(2.0)  # 20 - 1 - 14 - 3
    assert summary.dlopt_costliest == (("inductor", 12.0), ("inductor_freezing", 6.0), ("fx", 0.5))
    assert (summary.repeat_wall_s, summary.repeat_hit) == (4.5, True)
    page = markdown([summary], evaluate_targets([summary]), {})
    section = page.split("## Where dlopt's wall time goes")[1].split("## Targets")[0]
    row = "| Model | 20.0 | 1.0 | 14.0 | 3.0 | 2.0 | inductor 12.0, inductor_freezing 6.0, fx 0.5 |"
    assert f"{row} 4.5 (hit) | 5.0 |" in section
    # A repeat that missed the cache raced again, and says so.
    missed = attrs.evolve(result, repeat=attrs.evolve(repeat, cache_hit=False, wall_s=25.0))
    assert "| 25.0 (miss: raced) |" in markdown([summarize(missed)], [], {})
    # A run without the figures (a peer's, an old record) has no remainder to report.
    assert DecisionRun("peer", wall_s=5.0).other_s() is None
    assert model_result_from_json(json.loads(json.dumps(to_json_data(result)))) == result


def test_no_wall_time_section_without_build_figures():
    summary = summarize(ModelResult("m", "Model", dlopt=(dlopt_run("fx"),)))
    assert "Where dlopt's wall time goes" not in markdown([summary], [], {})


def test_the_openvino_section_names_where_an_openvino_plan_is_the_best():
    valid = ("eager_fp32", "onnxruntime_cpu", "openvino_cpu", "openvino_cpu_int8")
    won = ModelResult(
        "encoder",
        "encoder b8",
        dlopt=(dlopt_run("openvino_cpu_int8", valid=valid),),
        oracle=oracle(eager_fp32=4.0, onnxruntime_cpu=2.0, openvino_cpu=2.5, openvino_cpu_int8=1.0),
    )
    lost = ModelResult(
        "mlp",
        "MLP b32",
        dlopt=(dlopt_run("onnxruntime_cpu", valid=valid),),
        oracle=oracle(eager_fp32=4.0, onnxruntime_cpu=1.0, openvino_cpu=1.25),
    )
    without = ModelResult(
        "convnet", "conv b1", dlopt=(dlopt_run("fx"),), oracle=oracle(eager_fp32=2.0, fx=1.0)
    )
    results = (won, lost, without)
    summaries = [summarize(r) for r in results]
    page = markdown(summaries, evaluate_targets(summaries), {}, {r.key: r.oracle for r in results})
    section = page.split("## Where the OpenVINO plans win and lose", 1)[1].split("## ", 1)[0]
    assert (
        "On 2 workloads the oracle timed an OpenVINO plan; one is the oracle's best on 1: encoder b8."
        in section
    )
    assert (
        "| encoder b8 | openvino_cpu_int8 | 1.000x | openvino_cpu_int8 | openvino_cpu_int8 |"
        in section
    )
    assert "| MLP b32 | openvino_cpu | 1.250x | onnxruntime_cpu | onnxruntime_cpu |" in section
    assert "conv b1" not in section  # no OpenVINO plan was timed there


def test_no_openvino_section_when_no_openvino_plan_was_timed():
    result = ModelResult("m", "M", dlopt=(dlopt_run("fx"),), oracle=oracle(eager_fp32=2.0, fx=1.0))
    summaries = [summarize(result)]
    page = markdown(summaries, evaluate_targets(summaries), {}, {"m": result.oracle})
    assert "OpenVINO" not in page
