"""The suite's records, the arithmetic on them (regret, stability, targets) and the table.

Torch-free: every value here comes from the workers' JSON, so this module is tested on
hand-made records.

- **regret** of a pick = oracle latency of the pick / oracle latency of the fastest plan
  that passed validation - 1, each latency taken relative to the oracle's leader round by
  round (the paired ratio, which a slow spell of the machine does not move); oracle
  latencies are traffic-weighted, so a weighted workload's regret is too.
- **stability**: how many of the runs made the most common pick.
- **targets** (issue 20): dlopt's regret median <= 2% and max <= 5% over every decision;
  the same pick in all runs wherever the oracle's top two differ by > 5%; wall time to a
  decision no worse than the peer's on at least 4 of 8 workloads.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import cattrs
from attrs import field, frozen

from .timing import OracleSettings

#: The oracle's default settings, as the results page describes them.
_ORACLE = OracleSettings()

#: The peer's plans on CPU and the oracle plan that runs the same thing. The peer applies
#: AMP and channels-last only on CUDA, so its ``native`` plan is eager fp32 on CPU; its
#: ``fx`` plan (its own Conv-BN folding) is timed by the oracle as ``peer_fx``.
PEER_PLAN_IN_ORACLE = {"eager_fp32": "eager_fp32", "native": "eager_fp32", "fx": "peer_fx"}


@frozen
class Interval:
    point: float | None
    low: float | None = None
    high: float | None = None


@frozen
class DecisionRun:
    """One fresh process's decision (dlopt's or the peer's)."""

    tool: str
    pick: str | None = None
    #: The pick as the oracle names it (the peer's ``native`` is eager fp32 on CPU).
    oracle_name: str | None = None
    wall_s: float | None = None
    measure_s: float | None = None
    timed_calls: int | None = None
    #: dlopt: the pick's speedup vs eager fp32 as the decision measured it.
    pick_speedup: Interval | None = None
    stop_reason: str | None = None
    #: Plans that passed validation in this run.
    valid_plans: tuple[str, ...] = field(default=(), converter=tuple)
    error: str | None = None
    #: dlopt: where the wall time went. ``build_s``: every plan's build (its setup cost);
    #: ``first_calls_s``: every plan's first call per case, where lazy compilers
    #: (Inductor, TorchAO + Inductor) do their work; the rest of ``wall_s`` beyond these
    #: and ``measure_s`` is plugin discovery, probes, the reference and validation.
    build_s: float | None = None
    first_calls_s: float | None = None
    #: dlopt: the decision was served from the plan cache (a repeat decision), or raced.
    cache_hit: bool | None = None
    #: dlopt: each built plan's build plus first calls (s), costliest first.
    plan_costs_s: dict[str, float] = field(factory=dict)

    def other_s(self) -> float | None:
        """Wall time that was neither building, first calls nor measuring."""
        spent = (self.build_s, self.first_calls_s, self.measure_s)
        if self.wall_s is None or None in spent:
            return None
        return max(0.0, self.wall_s - math.fsum(s for s in spent if s is not None))


@frozen
class OraclePlan:
    name: str
    #: Traffic-weighted median latency (ms) and its order-statistic interval.
    median_ms: float
    low_ms: float
    high_ms: float
    #: "independent" (built by the suite with plain torch/ORT code), "provider" (built
    #: through dlopt's provider) or "peer" (the peer's own rewrite).
    built: str
    case_median_ms: dict[str, float] = field(factory=dict)
    rounds: int | None = None
    #: It left the rounds after this round (None: timed to the end), and why.
    dropped_after: int | None = None
    left_because: str | None = None
    #: Median ratio of its round values to the final leader's in the same rounds, with
    #: its interval (None for the leader).
    vs_leader: float | None = None
    vs_leader_low: float | None = None
    vs_leader_high: float | None = None


@frozen
class OracleResult:
    plans: tuple[OraclePlan, ...] = field(default=(), converter=tuple)
    rounds: int = 0
    time_s: float = 0.0
    settled: bool = False
    stop_reason: str | None = None
    #: Plans that could not be built or run by the oracle, with why.
    failures: dict[str, str] = field(factory=dict)
    error: str | None = None

    def relative(self, name: str | None) -> float | None:
        """The plan's latency over the oracle's leader's: its paired ratio (the median of
        its round values over the leader's in the same rounds), which a slow spell of
        the machine does not move; 1.0 for the leader. Records without paired ratios
        give the ratio of the two medians."""
        plan = next((p for p in self.plans if p.name == name), None)
        if plan is None:
            return None
        if plan.vs_leader is not None:
            return plan.vs_leader
        paired = any(p.vs_leader is not None for p in self.plans)
        leader = (
            next((p for p in self.plans if p.vs_leader is None and p.dropped_after is None), plan)
            if paired
            else min(self.plans, key=lambda p: (p.median_ms, p.name))
        )
        if plan is leader:
            return 1.0
        return plan.median_ms / leader.median_ms if leader.median_ms > 0 else None

    def ranked(self, among: Sequence[str] | None) -> list[tuple[float, str, OraclePlan]]:
        """``(relative latency, name, plan)`` fastest first, of ``among`` when given."""
        ranked = []
        for p in self.plans:
            rel = self.relative(p.name)
            if rel is not None and (among is None or p.name in among):
                ranked.append((rel, p.name, p))
        return sorted(ranked, key=lambda item: (item[0], item[1]))

    def best(self, among: Sequence[str] | None = None) -> OraclePlan | None:
        """The fastest plan (of ``among``, when given)."""
        ranked = self.ranked(among)
        return ranked[0][2] if ranked else None

    def top_two_gap(self, among: Sequence[str] | None = None) -> float | None:
        """How much slower the second plan is than the first (0.05: 5%)."""
        ranked = self.ranked(among)
        if len(ranked) < 2 or ranked[0][0] <= 0:
            return None
        return ranked[1][0] / ranked[0][0] - 1.0


@frozen
class ModelResult:
    key: str
    title: str
    dlopt: tuple[DecisionRun, ...] = field(default=(), converter=tuple)
    peer: tuple[DecisionRun, ...] = field(default=(), converter=tuple)
    oracle: OracleResult | None = None
    #: dlopt deciding again in a fresh process from the plan cache its last run wrote.
    repeat: DecisionRun | None = None
    #: The workload could not be built (a missing package, say): nothing else ran.
    error: str | None = None

    def valid_plans(self) -> tuple[str, ...]:
        """Plans that passed validation in any of dlopt's runs (what the oracle times)."""
        seen: dict[str, None] = {}
        for run in self.dlopt:
            seen.update(dict.fromkeys(run.valid_plans))
        return tuple(seen)


def regret(oracle: OracleResult | None, pick: str | None, valid: Sequence[str]) -> float | None:
    """Oracle latency of ``pick`` / that of the fastest plan of ``valid`` - 1 (None when
    either is unknown to the oracle)."""
    if oracle is None or pick is None:
        return None
    best = oracle.best(valid)
    mine = oracle.relative(pick)
    fastest = oracle.relative(best.name) if best is not None else None
    if mine is None or not fastest:
        return None
    return mine / fastest - 1.0


def stability(picks: Sequence[str | None]) -> tuple[str | None, int, int]:
    """(most common pick, how many runs made it, runs)."""
    made = [p for p in picks if p is not None]
    if not made:
        return None, 0, len(picks)
    pick, count = Counter(made).most_common(1)[0]
    return pick, count, len(picks)


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _median_run(runs: Sequence[DecisionRun]) -> DecisionRun | None:
    """The run whose wall time is the median (the lower middle one of an even count)."""
    timed = sorted((r for r in runs if r.wall_s is not None), key=lambda r: r.wall_s or 0.0)
    return timed[(len(timed) - 1) // 2] if timed else None


@frozen
class ModelSummary:
    """One table row: what the runs of one workload add up to."""

    key: str
    title: str
    dlopt_pick: str | None
    dlopt_stable: int
    runs: int
    dlopt_wall_s: float | None
    dlopt_measure_s: float | None
    dlopt_build_s: float | None
    dlopt_first_calls_s: float | None
    dlopt_other_s: float | None
    #: The three costliest plans to build (build + first calls) in the median-wall run.
    dlopt_costliest: tuple[tuple[str, float], ...]
    dlopt_timed_calls: float | None
    #: The repeat decision from the plan cache: its wall time and whether it was a hit.
    repeat_wall_s: float | None
    repeat_hit: bool | None
    dlopt_regrets: tuple[float | None, ...]
    dlopt_pick_speedup: Interval | None
    peer_pick: str | None
    peer_stable: int
    peer_runs: int
    peer_wall_s: float | None
    peer_timed_calls: float | None
    peer_regrets: tuple[float | None, ...]
    #: dlopt's median wall time / the peer's (< 1: dlopt decided faster).
    wall_ratio: float | None
    best_plan: str | None
    best_built: str | None
    top_two_gap: float | None
    #: The oracle's eager fp32 latency / that of dlopt's (most common) pick.
    pick_speedup_vs_eager: float | None
    oracle_settled: bool | None
    oracle_rounds: int | None
    error: str | None


def summarize(result: ModelResult) -> ModelSummary:
    valid = result.valid_plans()
    oracle = result.oracle
    d_pick, d_count, d_runs = stability([r.pick for r in result.dlopt])
    p_pick, p_count, p_runs = stability([r.oracle_name for r in result.peer])
    d_wall = _median([r.wall_s for r in result.dlopt])
    p_wall = _median([r.wall_s for r in result.peer])
    best = oracle.best(valid) if oracle is not None else None
    eager = oracle.relative("eager_fp32") if oracle is not None else None
    picked = oracle.relative(d_pick) if oracle is not None else None
    modal = next((r for r in result.dlopt if r.pick == d_pick), None)
    typical = _median_run(result.dlopt)
    errors = [result.error, oracle.error if oracle is not None else None]
    errors += [f"{r.tool}: {r.error}" for r in (*result.dlopt, *result.peer) if r.error]
    return ModelSummary(
        key=result.key,
        title=result.title,
        dlopt_pick=d_pick,
        dlopt_stable=d_count,
        runs=d_runs,
        dlopt_wall_s=d_wall,
        dlopt_measure_s=_median([r.measure_s for r in result.dlopt]),
        dlopt_build_s=_median([r.build_s for r in result.dlopt]),
        dlopt_first_calls_s=_median([r.first_calls_s for r in result.dlopt]),
        dlopt_other_s=_median([r.other_s() for r in result.dlopt]),
        dlopt_costliest=(
            tuple(sorted(typical.plan_costs_s.items(), key=lambda kv: -kv[1])[:3])
            if typical is not None
            else ()
        ),
        dlopt_timed_calls=_median([r.timed_calls for r in result.dlopt]),
        repeat_wall_s=result.repeat.wall_s if result.repeat is not None else None,
        repeat_hit=result.repeat.cache_hit if result.repeat is not None else None,
        dlopt_regrets=tuple(regret(oracle, r.pick, valid) for r in result.dlopt),
        dlopt_pick_speedup=modal.pick_speedup if modal is not None else None,
        peer_pick=p_pick,
        peer_stable=p_count,
        peer_runs=p_runs,
        peer_wall_s=p_wall,
        peer_timed_calls=_median([r.timed_calls for r in result.peer]),
        peer_regrets=tuple(regret(oracle, r.oracle_name, valid) for r in result.peer),
        wall_ratio=d_wall / p_wall if d_wall is not None and p_wall else None,
        best_plan=best.name if best is not None else None,
        best_built=best.built if best is not None else None,
        top_two_gap=oracle.top_two_gap(valid) if oracle is not None else None,
        pick_speedup_vs_eager=eager / picked if eager and picked else None,
        oracle_settled=oracle.settled if oracle is not None else None,
        oracle_rounds=oracle.rounds if oracle is not None else None,
        error="; ".join(e for e in errors if e) or None,
    )


@frozen
class TargetOutcome:
    name: str
    met: bool | None  # None: not enough data to judge
    detail: str


#: The regret targets and the stability / wall-time rules of issue 20.
MEDIAN_REGRET_TARGET = 0.02
MAX_REGRET_TARGET = 0.05
STABILITY_GAP = 0.05
WALL_TIME_WINS_NEEDED = 4


def evaluate_targets(summaries: Sequence[ModelSummary]) -> list[TargetOutcome]:
    regrets = [r for s in summaries for r in s.dlopt_regrets if r is not None]
    outcomes = []
    if regrets:
        med, worst = statistics.median(regrets), max(regrets)
        outcomes.append(
            TargetOutcome(
                "median regret <= 2%",
                med <= MEDIAN_REGRET_TARGET,
                f"{med:.1%} over {len(regrets)} decisions",
            )
        )
        outcomes.append(
            TargetOutcome("max regret <= 5%", worst <= MAX_REGRET_TARGET, f"{worst:.1%}")
        )
    else:
        for name in ("median regret <= 2%", "max regret <= 5%"):
            outcomes.append(TargetOutcome(name, None, "no decision has an oracle regret"))
    clear = [s for s in summaries if s.top_two_gap is not None and s.top_two_gap > STABILITY_GAP]
    unstable = [s.key for s in clear if s.dlopt_stable != s.runs or s.runs == 0]
    outcomes.append(
        TargetOutcome(
            "same pick in every run where the oracle's top two differ by > 5%",
            None if not clear else not unstable,
            f"{len(clear) - len(unstable)} of {len(clear)} such workloads stable"
            + (f" (unstable: {', '.join(unstable)})" if unstable else ""),
        )
    )
    compared = [s for s in summaries if s.wall_ratio is not None]
    wins = [s for s in compared if s.wall_ratio is not None and s.wall_ratio <= 1.0]
    needed = min(WALL_TIME_WINS_NEEDED, len(summaries)) if summaries else WALL_TIME_WINS_NEEDED
    outcomes.append(
        TargetOutcome(
            f"wall time <= the peer's on >= {WALL_TIME_WINS_NEEDED} of 8 workloads",
            None if not compared else len(wins) >= needed,
            f"dlopt as fast or faster on {len(wins)} of {len(compared)} workloads compared"
            + (f"; {len(summaries)} of 8 ran, so {needed} needed" if len(summaries) < 8 else ""),
        )
    )
    return outcomes


# -- the Markdown table ---------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _regrets(values: Sequence[float | None]) -> str:
    return ", ".join(_pct(v) for v in values) if values else "-"


def _speedup(interval: Interval | None) -> str:
    if interval is None or interval.point is None:
        return "-"
    if interval.low is None or interval.high is None:
        return f"{interval.point:.2f}x"
    return f"{interval.point:.2f}x [{interval.low:.2f}, {interval.high:.2f}]"


def markdown(
    summaries: Sequence[ModelSummary],
    targets: Sequence[TargetOutcome],
    environment: dict[str, Any],
    oracles: dict[str, OracleResult | None] | None = None,
) -> str:
    """The results page: machine, the per-workload table, targets, oracle details."""
    env = environment
    lines = [
        "# Benchmark suite results",
        "",
        f"- CPU: {env.get('cpu_model', '?')} ({env.get('cpus', '?')} CPUs); ISA flags: "
        f"{', '.join(env.get('isa_flags') or []) or 'none of interest'}",
        f"- torch {env.get('torch', '?')}, dlopt {env.get('dlopt', '?')} (commit "
        f"{env.get('commit', '?')}), peer custom-dl-optimizer {env.get('peer', '?')}, "
        f"Python {env.get('python', '?')}",
        f"- load average (1/5/15 min) before: {env.get('load_before', '?')}; after: "
        f"{env.get('load_after', '?')}",
        f"- command: `{env.get('command', '?')}`; {env.get('repeats', '?')} fresh processes "
        f"per tool and workload; suite time {_num(env.get('suite_time_s'), '.0f', ' s')}",
    ]
    if env.get("rendered_at_commit"):
        lines.append(
            f"- measured at commit {env.get('commit', '?')}; tables computed again from its "
            f"records at commit {env['rendered_at_commit']} (`--rerender`)"
        )
    if env.get("compiler_caches"):
        lines.append(f"- compiler caches: {env['compiler_caches']}")
    if env.get("note"):
        lines.append(f"- note: {env['note']}")
    if env.get("quick"):
        lines.append("- **quick mode: a smoke run, the numbers mean nothing**")
    lines += [
        "",
        "Wall time is to a decision (optimizer constructed, plans built, validated and "
        "raced); medians over the runs. Regret is against the oracle's fastest plan that "
        "passed dlopt's validation, one figure per run. Speedup vs eager is the oracle's.",
        "",
        "| workload | dlopt pick (stable) | dlopt wall s | measure s | timed calls | dlopt "
        "regret | pick interval vs eager | peer pick (stable) | peer wall s | peer timed "
        "calls | peer regret | wall dlopt/peer | oracle best (built) | top-two gap | pick "
        "speedup vs eager |",
        "|" + "---|" * 15,
    ]
    for s in summaries:
        if s.error and s.dlopt_pick is None and s.peer_pick is None:
            lines.append(f"| {s.title} | failed: {s.error} |" + " |" * 13)
            continue
        lines.append(
            f"| {s.title} | {s.dlopt_pick or '-'} ({s.dlopt_stable}/{s.runs}) | "
            f"{_num(s.dlopt_wall_s)} | {_num(s.dlopt_measure_s)} | "
            f"{_num(s.dlopt_timed_calls, '.0f')} | {_regrets(s.dlopt_regrets)} | "
            f"{_speedup(s.dlopt_pick_speedup)} | {s.peer_pick or '-'} "
            f"({s.peer_stable}/{s.peer_runs}) | {_num(s.peer_wall_s)} | "
            f"{_num(s.peer_timed_calls, '.0f')} | {_regrets(s.peer_regrets)} | "
            f"{_num(s.wall_ratio, '.2f', 'x')} | {s.best_plan or '-'} ({s.best_built or '-'}) | "
            f"{_pct(s.top_two_gap)} | {_num(s.pick_speedup_vs_eager, '.2f', 'x')} |"
        )
    lines += _wall_time_section(summaries)
    lines += _family_section(summaries, oracles or {}, "openvino_", "OpenVINO")
    lines += ["", "## Targets", ""]
    for t in targets:
        verdict = "not judged" if t.met is None else "met" if t.met else "not met"
        lines.append(f"- {t.name}: **{verdict}** ({t.detail})")
    problems = [s for s in summaries if s.error]
    if problems:
        lines += ["", "## Failures", ""]
        lines += [f"- {s.title}: {s.error}" for s in problems]
    if oracles:
        lines += [
            "",
            "## The oracle",
            "",
            "Every plan that passed validation in any dlopt run, timed in interleaved rounds "
            "(random order each round, a burst per plan and case: untimed settling calls, "
            "then timed calls whose median is the burst's latency). Latency: the median over "
            "rounds of the traffic-weighted burst latencies, with its order-statistic "
            "interval. Vs leader, paired: the median of the plan's round values over the "
            "leader's in the same rounds, with its interval (pairing cancels a slow spell "
            "that every plan timed in it shares): regrets, the top-two gap and speedups "
            "are taken from these ratios, and the table is ordered by them. The ranking is "
            "settled when each such "
            f"interval lies above 1 or within {_ORACLE.tie_tolerance:.0%} of 1. A plan more "
            f"than {_ORACLE.drop_factor:g}x slower than the leader leaves the rounds after "
            f"{_ORACLE.drop_after_rounds}, and one settled more than "
            f"{_ORACLE.tie_tolerance:.0%} slower after {_ORACLE.min_rounds} (picks too). "
            "Built: `independent` by the suite's own torch code, `provider` through dlopt's "
            "provider (no independent build written for it), `peer` the peer's own rewrite.",
        ]
        for s in summaries:
            oracle = oracles.get(s.key)
            if oracle is None or not oracle.plans:
                continue
            state = "settled" if oracle.settled else f"not settled ({oracle.stop_reason})"
            lines += [
                "",
                f"### {s.title}: {oracle.rounds} rounds, {oracle.time_s:.0f} s, {state}",
                "",
                "| plan | median ms | interval ms | vs leader, paired | rounds | built |",
                "|---|---|---|---|---|---|",
            ]
            ranked = oracle.ranked(None)
            ranked_names = [name for _, name, _ in ranked]
            unranked = [p for p in oracle.plans if p.name not in ranked_names]
            for p in [plan for _, _, plan in ranked] + unranked:
                rounds = _num(p.rounds, "d")
                if p.dropped_after is not None:
                    rounds += f" (left: {p.left_because or '> 2x the leader'})"
                paired = "-"
                if p.vs_leader is not None:
                    paired = f"{p.vs_leader:.3f}x [{p.vs_leader_low:.3f}, {p.vs_leader_high:.3f}]"
                lines.append(
                    f"| {p.name} | {p.median_ms:.3f} | {p.low_ms:.3f}-{p.high_ms:.3f} | "
                    f"{paired} | {rounds} | {p.built} |"
                )
            for name, why in oracle.failures.items():
                lines.append(f"| {name} | - | not timed: {why} | - | - | - |")
    return "\n".join(lines) + "\n"


def _wall_time_section(summaries: Sequence[ModelSummary]) -> list[str]:
    """Where dlopt's wall time to a decision went (medians over its runs)."""
    rows = [s for s in summaries if s.dlopt_wall_s is not None and s.dlopt_build_s is not None]
    if not rows:
        return []
    lines = [
        "",
        "## Where dlopt's wall time goes",
        "",
        "Medians over dlopt's runs. Build: every plan's build; first calls: every plan's "
        "first call per case, where Inductor and TorchAO + Inductor compile; measuring: the "
        "race; other: plugin discovery, probes, the reference, validation. The costliest "
        "plans are from the run with the median wall time. Repeat: dlopt deciding again in "
        "a fresh process from the plan cache its last run wrote (the record revalidated "
        "on every case and probed against the baseline; docs/cache.md).",
        "",
        "| workload | wall s | build s | first calls s | measuring s | other s | costliest "
        "plans (build + first calls, s) | repeat s (plan cache) | peer wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in rows:
        costly = ", ".join(f"{name} {sec:.1f}" for name, sec in s.dlopt_costliest) or "-"
        lines.append(
            f"| {s.title} | {_num(s.dlopt_wall_s)} | {_num(s.dlopt_build_s)} | "
            f"{_num(s.dlopt_first_calls_s)} | {_num(s.dlopt_measure_s)} | "
            f"{_num(s.dlopt_other_s)} | {costly} | {_repeat(s)} | {_num(s.peer_wall_s)} |"
        )
    return lines


def _family_section(
    summaries: Sequence[ModelSummary],
    oracles: dict[str, OracleResult | None],
    prefix: str,
    family: str,
) -> list[str]:
    """Where one family of plans (``openvino_*``) wins and loses: per workload whose
    oracle timed one of them, its fastest plan against the oracle's best valid plan."""
    rows = []
    for s in summaries:
        oracle = oracles.get(s.key)
        if oracle is None or s.best_plan is None:
            continue
        ours = oracle.best([p.name for p in oracle.plans if p.name.startswith(prefix)])
        if ours is None:
            continue
        mine, best = oracle.relative(ours.name), oracle.relative(s.best_plan)
        ratio = mine / best if mine is not None and best else None
        rows.append((s, ours.name, ratio))
    if not rows:
        return []
    wins = [s.title for s, name, _ in rows if name == s.best_plan]
    where = ", ".join(wins) if wins else "none of them"
    lines = [
        "",
        f"## Where the {family} plans win and lose",
        "",
        f"On {len(rows)} workloads the oracle timed an {family} plan; one is the oracle's best "
        f"on {len(wins)}: {where}. Vs the best: the paired latency ratio of the fastest "
        f"{family} plan to the oracle's best valid plan (1.000: it is the best).",
        "",
        f"| workload | fastest {family} plan | vs the best, paired | oracle's best | dlopt pick |",
        "|---|---|---|---|---|",
    ]
    for s, name, ratio in rows:
        lines.append(
            f"| {s.title} | {name} | {_num(ratio, '.3f', 'x')} | {s.best_plan} | "
            f"{s.dlopt_pick or '-'} |"
        )
    return lines


def _repeat(s: ModelSummary) -> str:
    if s.repeat_wall_s is None:
        return "-"
    how = "?" if s.repeat_hit is None else "hit" if s.repeat_hit else "miss: raced"
    return f"{s.repeat_wall_s:.1f} ({how})"


CONVERTER = cattrs.Converter()


def to_json_data(obj: Any) -> Any:
    """Plain JSON data for a record (or a list or dict of them)."""
    return CONVERTER.unstructure(obj)


def model_result_from_json(data: Any) -> ModelResult:
    return CONVERTER.structure(data, ModelResult)
