"""Reports to read: from real small races (fake providers on a fake clock) and hand-made
edge cases derived from them (all challengers failed, unresolved comparisons, only
unavailable providers, optional fields missing, raw samples recorded)."""

from __future__ import annotations

import random

import attrs
import pytest
import torch

from dlopt.evidence.report import OptimizationReport, evolve_candidate
from dlopt.measurement import LatencyStats
from dlopt.pipeline.state import StageError
from dlopt.settings.policy import DeploymentConstraints
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.testing.fake_race import FakeRace
from dlopt.testing.models import StructuredMLP
from dlopt.vocabulary import Stage, Status, Verdict


def _workload() -> WorkloadProfile:
    gen = torch.Generator().manual_seed(5)
    return WorkloadProfile(
        name="mlp",
        inputs="random tensors of the given shapes",
        cases=(
            WorkloadCase("b1", args=(torch.randn(1, 16, generator=gen),), weight=70),
            WorkloadCase("b4", args=(torch.randn(4, 16, generator=gen),), weight=30),
        ),
    )


@pytest.fixture(scope="session")
def race_report() -> OptimizationReport:
    """A real race: a winner, a slower challenger, a build failure, a wrong plan and an
    unavailable provider."""
    race = FakeRace(seed=11)
    optimizer = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("fast", 1e-3, setup_time_s=0.5),
        race.fake("mid", 1.8e-3),
        race.fake("broken", 1e-3, fail="build"),
        race.fake("wrong", 1e-3, fail="validation"),
        race.fake("nosdk", 1e-3, fail="probe"),
    )
    decision = optimizer.select(StructuredMLP().eval(), _workload())
    decision.close()
    return decision.report


@pytest.fixture(scope="session")
def lifecycle_report() -> OptimizationReport:
    """A lifecycle race: a faster plan that costs setup, with a break-even point."""
    race = FakeRace(seed=12)
    optimizer = race.optimizer(
        race.fake("eager_fp32", 2e-3),
        race.fake("compiled", 1e-3, setup_time_s=1.0),
        objective="lifecycle_latency",
        constraints=DeploymentConstraints(expected_calls=5000),
    )
    decision = optimizer.select(StructuredMLP().eval(), _workload())
    decision.close()
    return decision.report


@attrs.frozen
class _SampledLatency(LatencyStats):
    samples_ms: tuple[float, ...] = ()


def with_raw_samples(report: OptimizationReport, seed: int = 0) -> OptimizationReport:
    """``report`` with raw per-call samples recorded on every measured case."""
    rng = random.Random(seed)
    has_field = "samples_ms" in attrs.fields_dict(LatencyStats)
    candidates = []
    for cand in report.candidates:
        cases = []
        for case in cand.cases:
            lat = case.latency
            if lat is not None:
                samples = tuple(
                    (lat.median_ms or 1.0) * (1 + rng.uniform(-0.05, 0.05)) + 1e-17 * i
                    for i in range(lat.timed_calls or 8)
                )
                if has_field:
                    lat = attrs.evolve(lat, samples_ms=samples)
                else:
                    lat = _SampledLatency(**attrs.asdict(lat, recurse=False), samples_ms=samples)
            cases.append(attrs.evolve(case, latency=lat))
        candidates.append(evolve_candidate(cand, cases=tuple(cases)))
    return attrs.evolve(report, candidates=tuple(candidates))


def all_failed(report: OptimizationReport) -> OptimizationReport:
    """Every challenger rejected at build: the baseline is kept."""
    candidates = []
    for cand in report.candidates:
        if cand.name == report.baseline:
            candidates.append(evolve_candidate(cand, status=Status.SELECTED))
            continue
        candidates.append(
            evolve_candidate(
                cand,
                status=Status.REJECTED,
                error=StageError(Stage.BUILD, f"{cand.name}: unsupported operator aten::x"),
                latency_ms=None,
                latency_p99_ms=None,
                speedup_vs_eager=None,
                confidence_gate_passed=None,
                measurement_verdict=None,
                cases=(),
            )
        )
    return attrs.evolve(
        report,
        candidates=tuple(candidates),
        selected_plan=report.baseline,
        selection_reason="Kept eager_fp32: every challenger failed.",
    )


def unresolved(report: OptimizationReport) -> OptimizationReport:
    """The race stopped before any comparison was resolved."""
    candidates = tuple(
        evolve_candidate(cand, measurement_verdict=Verdict.UNRESOLVED, confidence_gate_passed=False)
        if cand.name != report.baseline and cand.measurement_verdict is not None
        else cand
        for cand in report.candidates
    )
    return attrs.evolve(report, candidates=candidates, selected_plan=report.baseline)


def only_unavailable(report: OptimizationReport) -> OptimizationReport:
    """Nothing but the baseline could run here."""
    candidates = tuple(
        cand
        if cand.name == report.baseline
        else evolve_candidate(
            cand,
            status=Status.UNAVAILABLE,
            availability_reason=f"{cand.name} needs a CUDA GPU",
            install_hint="pip install torch --index-url https://download.pytorch.org/whl/cu126",
            error=None,
            cases=(),
            parity=None,
            latency_ms=None,
            speedup_vs_eager=None,
            measurement_verdict=None,
            confidence_gate_passed=None,
        )
        for cand in report.candidates
    )
    return attrs.evolve(report, candidates=candidates, selected_plan=report.baseline)


def bare(report: OptimizationReport) -> OptimizationReport:
    """Every optional field missing: no measurement, no latency, no validation."""
    optional = {
        a.name: (
            ()
            if a.name == "cases"
            else a.default.factory()
            if isinstance(a.default, attrs.Factory)
            else a.default
        )
        for a in attrs.fields(type(report.candidates[0]))
        if a.default is not attrs.NOTHING and a.name not in ("metadata", "artifacts")
    }
    candidates = tuple(evolve_candidate(cand, **optional) for cand in report.candidates)
    return attrs.evolve(report, candidates=candidates, measurement=None, plugin_failures=())


EDGE_CASES = {
    "all_failed": all_failed,
    "unresolved": unresolved,
    "only_unavailable": only_unavailable,
    "bare": bare,
}


@pytest.fixture(params=sorted(EDGE_CASES))
def edge_report(request: pytest.FixtureRequest, race_report: OptimizationReport):
    """Each hand-made edge case, named by ``request.param``."""
    return request.param, EDGE_CASES[request.param](race_report)


@pytest.fixture
def unavailable_report(race_report: OptimizationReport) -> OptimizationReport:
    """Only the baseline ran; every other plan is unavailable with a long install hint."""
    return only_unavailable(race_report)


@pytest.fixture
def sampled_report(race_report: OptimizationReport) -> OptimizationReport:
    """The race's report with raw per-call samples on every measured case."""
    return with_raw_samples(race_report)
