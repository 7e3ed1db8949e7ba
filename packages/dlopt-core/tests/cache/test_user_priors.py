"""Priors from the plan cache's reports: only what a race could vouch for becomes one.

Each record is a real report (a fake race) with one plan's figures replaced, written into a
plan cache the way a selection writes it; a few are edited on disk after that.
"""

from __future__ import annotations

import hashlib
import json
import math

import attrs
import pytest
import torch

from dlopt.bundle.store import MANIFEST_NAME, REPORT_NAME, sha256_file
from dlopt.cache.record_store import BUNDLE_DIR, PlanCache
from dlopt.cache.user_priors import (
    KEY_DIGITS,
    PLAUSIBLE_SPEEDUP,
    WIDEN,
    priors_from_reports,
    user_priors,
)
from dlopt.evidence.report import OptimizationReport, evolve_candidate
from dlopt.measurement.stats import RatioInterval
from dlopt.testing.fake_race import FakeRace


@pytest.fixture(scope="module")
def report() -> OptimizationReport:
    """A race of eager fp32 and ``fast`` (about 2x) on a small linear model."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8)).eval()
    race = FakeRace()
    optimizer = race.optimizer(race.fake("eager_fp32", 2e-3), race.fake("fast", 1e-3))
    decision = optimizer.select_signature(model, torch.randn(4, 16))
    decision.close()
    # What other processes did while this fixture raced is not what these tests vary.
    timing = attrs.evolve(decision.report.decision_time, machine_load=None)
    return attrs.evolve(decision.report, decision_time=timing)


def measured(
    report: OptimizationReport,
    point: float,
    *,
    low: float | None = None,
    high: float | None = None,
    rounds: int = 8,
    noisy: bool = False,
    reference_noisy: bool = False,
    setup_time_s: float | None = 0.5,
    first_call_time_s: float | None = 0.01,
) -> OptimizationReport:
    """``report`` with ``fast`` measured at ``point`` over eager fp32 in [low, high]."""
    interval = RatioInterval(
        point,
        point / 1.1 if low is None else low,
        point * 1.1 if high is None else high,
        0.95,
        "test",
        rounds,
    )
    candidates = []
    for cand in report.candidates:
        if cand.name == "fast":
            cand = evolve_candidate(
                cand,
                speedup_vs_eager=interval,
                noisy=noisy,
                setup_time_s=setup_time_s,
                first_call_time_s=first_call_time_s,
            )
        elif cand.role == "reference":
            cand = evolve_candidate(cand, noisy=reference_noisy)
        candidates.append(cand)
    return attrs.evolve(report, candidates=tuple(candidates))


def write(cache_dir, reports: list[OptimizationReport]) -> list[str]:
    """Store each report as a record of its own; their keys."""
    cache = PlanCache(cache_dir)
    keys = []
    for index, each in enumerate(reports):
        key = hashlib.sha256(f"record {index}".encode()).hexdigest()
        assert cache.write(key, {"index": index}, each, {}).written
        keys.append(key)
    return keys


def priors_of(cache_dir, report: OptimizationReport):
    timing = report.decision_time
    assert timing is not None
    return user_priors(str(cache_dir), timing.machine_class, timing.mix_kind)


def edit_report(cache_dir, key: str, old: str, new: str, *, keep_hash: bool) -> None:
    """Replace ``old`` by ``new`` in a record's report.json; ``keep_hash``: write the new
    bytes' SHA-256 into the manifest too (a consistent record of a strange report)."""
    bundle = PlanCache(cache_dir).record_path(key) / BUNDLE_DIR
    path = bundle / REPORT_NAME
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    if keep_hash:
        manifest = json.loads((bundle / MANIFEST_NAME).read_text())
        manifest["report_sha256"] = sha256_file(path)
        (bundle / MANIFEST_NAME).write_text(json.dumps(manifest))


def test_a_speedup_of_zero_or_below_is_skipped_not_a_crash(tmp_path, report):
    keys = write(
        tmp_path,
        [measured(report, s) for s in (2.0, 2.2)]
        + [measured(report, 0.0, low=0.0, high=0.0), measured(report, -3.0, low=-4.0, high=-2.0)],
    )
    fast = priors_of(tmp_path, report)["fast"]
    assert fast.speedup == pytest.approx(math.sqrt(2.0 * 2.2))
    assert fast.pass_rate == 1.0  # the skipped records still passed validation
    named = fast.source[fast.source.index("(records ") :]
    assert keys[0][:KEY_DIGITS] in named and keys[1][:KEY_DIGITS] in named
    assert keys[2][:KEY_DIGITS] not in named and keys[3][:KEY_DIGITS] not in named
    assert fast.source.endswith("; left out: 2 implausible")


def test_a_speedup_or_bound_of_1e308_is_no_evidence(tmp_path, report):
    write(
        tmp_path,
        [
            measured(report, 2.0),
            measured(report, 1e308, low=1e307, high=1e308),
            measured(report, 2.1, low=0.0, high=1e308),
        ],
    )
    fast = priors_of(tmp_path, report)["fast"]
    assert fast.speedup == pytest.approx(math.sqrt(2.0 * 2.1))
    # The wild bounds read as the point: the interval is the two sane records' spread.
    assert fast.low == pytest.approx(2.0 / 1.1 / WIDEN)
    assert fast.high == pytest.approx(2.0 * 1.1 * WIDEN)
    assert "left out: 1 implausible" in fast.source


def test_an_infinite_speedup_read_from_a_consistent_record_is_no_evidence(tmp_path, report):
    keys = write(tmp_path, [measured(report, 2.0), measured(report, 7.125)])
    # 1e999 is valid JSON and reads as infinity; the manifest agrees with the bytes.
    edit_report(tmp_path, keys[1], '"point": 7.125', '"point": 1e999', keep_hash=True)
    fast = priors_of(tmp_path, report)["fast"]
    assert fast.speedup == pytest.approx(2.0)
    assert f"(records {keys[0][:KEY_DIGITS]})" in fast.source


def test_a_cost_that_overflows_is_no_cost(tmp_path, report):
    write(
        tmp_path,
        [
            measured(report, 2.0, setup_time_s=1e308, first_call_time_s=1e308),
            measured(report, 2.0, setup_time_s=-5.0),
            measured(report, 2.0, setup_time_s=3.0, first_call_time_s=1.0),
        ],
    )
    fast = priors_of(tmp_path, report)["fast"]
    assert fast.cost_s == pytest.approx(4.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_figures_in_a_report_are_skipped(report, bad):
    """Strict JSON cannot hold NaN, but a report may reach the evidence in memory."""
    reports = [
        ("a" * 64, measured(report, 2.0)),
        ("b" * 64, measured(report, bad)),
        ("c" * 64, measured(report, 2.0, low=bad, high=bad, setup_time_s=bad)),
    ]
    timing = report.decision_time
    assert timing is not None
    fast = priors_from_reports(reports, timing.machine_class, timing.mix_kind)["fast"]
    assert fast.speedup == pytest.approx(2.0)
    assert fast.low == pytest.approx(2.0 / 1.1 / WIDEN) and math.isfinite(fast.high)
    assert fast.cost_s == pytest.approx(0.51)
    assert (
        f"(records {'a' * KEY_DIGITS}, {'c' * KEY_DIGITS}); left out: 1 implausible" in fast.source
    )


def test_one_far_record_among_agreeing_ones_is_left_out_and_the_median_used(tmp_path, report):
    speedups = (2.0, 2.1, 1.9, 2.05, 1.95, 60.0, 1000.0)
    write(tmp_path, [measured(report, s) for s in speedups])
    fast = priors_of(tmp_path, report)["fast"]
    assert fast.speedup == pytest.approx(2.0)  # the median of the five that agree
    assert fast.high == pytest.approx(2.1 * 1.1 * WIDEN)
    assert fast.source.startswith("your evidence: 5 selection(s) on ")
    assert fast.source.endswith("; left out: 1 implausible, 1 outlier")
    assert fast.high < PLAUSIBLE_SPEEDUP


def test_a_noisy_race_is_no_evidence_of_speed(tmp_path, report):
    write(
        tmp_path,
        [
            measured(report, 2.0),
            measured(report, 2.2),
            # The plan's own race was noisy; eager fp32 was slowed by a busy machine.
            measured(report, 90.0, noisy=True),
            measured(report, 40.0, reference_noisy=True),
        ],
    )
    fast = priors_of(tmp_path, report)["fast"]
    assert fast.speedup == pytest.approx(math.sqrt(2.0 * 2.2))
    assert fast.pass_rate == 1.0
    assert fast.source.endswith("; left out: 2 noisy")


def test_only_noisy_races_give_no_prior(tmp_path, report):
    write(tmp_path, [measured(report, 900.0, noisy=True), measured(report, 1.0, rounds=1)])
    assert "fast" not in priors_of(tmp_path, report)


def test_a_report_edited_after_it_was_stored_is_no_evidence(tmp_path, report):
    keys = write(tmp_path, [measured(report, 2.0), measured(report, 2.0), measured(report, 2.5)])
    edit_report(tmp_path, keys[2], '"point": 2.5', '"point": 50.0', keep_hash=False)
    fast = priors_of(tmp_path, report)["fast"]
    assert fast.speedup == pytest.approx(2.0)
    assert fast.source.startswith("your evidence: 2 selection(s) on ")
    assert keys[2][:KEY_DIGITS] not in fast.source
    assert keys[0][:KEY_DIGITS] in fast.source and keys[1][:KEY_DIGITS] in fast.source


def test_a_race_on_a_busy_machine_is_no_evidence_of_speed(tmp_path, report):
    from dlopt.evidence.report import MachineLoadEvidence

    def busy(rep: OptimizationReport) -> OptimizationReport:
        load = MachineLoadEvidence(
            cpus=2,
            load_before=3.1,
            load_after=3.4,
            others_cpus=1.4,
            reference_drift=1.1,
            busy=True,
            why="other processes used 1.4 of 2 CPUs",
        )
        timing = attrs.evolve(rep.decision_time, machine_load=load)
        return attrs.evolve(rep, decision_time=timing)

    # No race was flagged noisy: the other processes' work is what says so.
    write(tmp_path, [measured(report, 2.0), measured(report, 2.2), busy(measured(report, 30.0))])
    fast = priors_of(tmp_path, report)["fast"]
    assert fast.speedup == pytest.approx(math.sqrt(2.0 * 2.2))
    assert fast.source.endswith("; left out: 1 noisy")
