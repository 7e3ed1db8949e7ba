"""What the user asks of a selection: objective, constraints, measurement and quality."""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from attrs import field, frozen

from dlopt.errors import ConfigurationError
from dlopt.platform.config_checks import boolean, instance_of, integer, number, one_of
from dlopt.platform.serialization import user_document
from dlopt.settings.guard import GuardPolicy, guard_field
from dlopt.settings.measurement import MeasurementPolicy
from dlopt.settings.quality import QualityPolicy
from dlopt.vocabulary import NonFiniteInput, Objective, PlanFailure, UnseenSignature

OBJECTIVES: tuple[str, ...] = tuple(o.value for o in Objective)
#: Where a selection runs: in the caller's process, or in a supervised worker process.
ISOLATION_MODES: tuple[str, ...] = ("in_process", "process")


#: The ``"auto"`` time budget: this many seconds, plus :data:`AUTO_BUDGET_PER_CALL`
#: times one reference call of every case (what each call per case of a race costs the
#: reference, whatever the traffic weights), at most :data:`AUTO_BUDGET_MAX_S`. The demo
#: (1-2 ms calls) gets about 11 s; a model of 30 ms calls 20 s, of 100 ms 40 s.
AUTO_BUDGET_BASE_S = 10.0
AUTO_BUDGET_PER_CALL = 300.0
AUTO_BUDGET_MAX_S = 300.0
#: Where no prior speaks for any plan (a mix the table has no row for), the ``"auto"``
#: budget is this many times larger (still at most :data:`AUTO_BUDGET_MAX_S`): with
#: priors it prunes most builds; without them one plan of every family is built and
#: raced. On an LSTM tagger (AVX2, 7 ms calls) six builds (4.7 s, their SDKs' imports
#: besides) left the race 1.7 s of an 11 s budget: three rounds of six plans decided
#: nothing and eager was kept over ONNX Runtime int8 at 3.9x.
EXPLORING_BUDGET_FACTOR = 1.5


def auto_time_budget(reference_call_s: float) -> float:
    """The ``"auto"`` time budget for a model whose eager calls of every case take
    ``reference_call_s`` together."""
    return min(
        AUTO_BUDGET_BASE_S + AUTO_BUDGET_PER_CALL * max(reference_call_s, 0.0), AUTO_BUDGET_MAX_S
    )


def budget_seconds(policy: OptimizationPolicy, reference_call_s: float) -> tuple[float | None, str]:
    """The time budget ``policy`` gives a model whose eager calls take ``reference_call_s``,
    in seconds (``None``: none), and how it was set: ``auto``, ``policy`` or ``none``."""
    if policy.exhaustive or policy.time_budget_s is None:
        return None, "none"
    if policy.time_budget_s == "auto":
        return auto_time_budget(reference_call_s), "auto"
    return float(policy.time_budget_s), "policy"


#: The longest time budget accepted (a week): a longer one is no budget at all, and
#: beyond about 9e9 s its deadline no longer fits the clock's nanoseconds.
MAX_TIME_BUDGET_S = 7 * 86400.0


def _check_budget(instance: object, attribute: Any, value: object) -> None:
    if value is None or value == "auto":
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= MAX_TIME_BUDGET_S
    ):
        raise ConfigurationError(
            f"OptimizationPolicy.time_budget_s must be a number of seconds > 0 and at most "
            f'{MAX_TIME_BUDGET_S:g} (a week), "auto" or None (no budget), got {value!r}'
        )


#: How long one provider's probe may take before it is reported unavailable. Cold, the
#: first probe of a distribution imports its SDK (``dlopt providers --json`` reports each
#: ``probe_time_s``: about 1-1.5 s for torchao and 0.6 s for onnxruntime on a 2-core CPU
#: VM, under 0.1 s for the rest); torch_tensorrt's import on a GPU box was not measured
#: here. 20 s leaves every real probe comfortably available.
DEFAULT_PROBE_TIMEOUT_S = 20.0
PROBE_TIMEOUT_ENV = "DLOPT_PROBE_TIMEOUT_S"
#: The longest probe limit accepted (a day): beyond it a thread wait overflows the
#: platform's timeout and every probe would fail.
MAX_PROBE_TIMEOUT_S = 86400.0


def default_probe_timeout_s(environ: Mapping[str, str] | None = None) -> float:
    """The probe time limit: ``$DLOPT_PROBE_TIMEOUT_S`` if set, else ``DEFAULT_PROBE_TIMEOUT_S``."""
    env = os.environ if environ is None else environ
    raw = env.get(PROBE_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_PROBE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_PROBE_TIMEOUT_S):
        raise ConfigurationError(
            f"{PROBE_TIMEOUT_ENV} must be a number of seconds > 0 and <= "
            f"{MAX_PROBE_TIMEOUT_S:g} (e.g. 20), got {raw!r}; unset it for the default "
            f"{DEFAULT_PROBE_TIMEOUT_S:g} s"
        )
    return value


_positive_or_none = number(minimum=0, low_open=True, optional=True)


@user_document
@frozen
class DeploymentConstraints:
    """Limits a plan must respect to be deployable, and the bar a challenger must clear.

    ``min_speedup``: a challenger replaces the baseline only when the lower confidence
    bound of its speedup is at least this (1.02 = "2% faster, with confidence").
    ``expected_calls``: how many requests the deployment will serve (lifecycle objective).
    Time limits are per plan; ``max_first_call_time_s`` applies to each workload case.
    ``max_latency_ms`` bounds the traffic-weighted mean steady-state latency and
    ``max_p99_latency_ms`` the traffic-weighted p99.
    """

    min_speedup: float = field(
        default=1.02, validator=number(minimum=0, low_open=True, hint=" (e.g. 1.02)")
    )
    expected_calls: int | None = field(
        default=None, validator=integer(minimum=0, optional=True, hint=" (a count of requests)")
    )
    max_setup_time_s: float | None = field(default=None, validator=_positive_or_none)
    max_first_call_time_s: float | None = field(default=None, validator=_positive_or_none)
    max_peak_memory_mb: float | None = field(default=None, validator=_positive_or_none)
    max_latency_ms: float | None = field(default=None, validator=_positive_or_none)
    max_p99_latency_ms: float | None = field(default=None, validator=_positive_or_none)


def _names(value: object) -> tuple[str, ...] | None:
    # Strings are checked by _check_names; anything else iterable is kept as given.
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
        return value  # type: ignore[return-value]  # refused by _check_names
    return tuple(value)


def _cache_dir(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigurationError(
            f"OptimizationPolicy.plan_cache_dir must be a directory path (str or Path), got "
            f"{value!r}"
        )
    return str(value)


def _check_names(instance: object, attribute: Any, value: Any) -> None:
    name = getattr(attribute, "name", "include")
    if value is None and name == "include":
        return
    if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
        raise ConfigurationError(
            f"OptimizationPolicy.{name} must be plan names: a string or a list of strings "
            f"(e.g. ['onnxruntime_cpu']), got {value!r}"
        )


@frozen
class OptimizationPolicy:
    """The whole selection policy.

    ``objective`` is used exactly as given: ``steady_state_latency`` (traffic-weighted mean
    request latency) or ``lifecycle_latency`` (setup + first calls + remaining expected
    calls x steady latency). ``include``/``exclude`` filter providers by name
    (:func:`check_plan_names` refuses names that match no registered plan).
    ``probe_timeout_s``: how long one provider's probe may take before the provider is
    reported unavailable (default ``$DLOPT_PROBE_TIMEOUT_S`` or
    :data:`DEFAULT_PROBE_TIMEOUT_S`). ``plan_options``: per plan name, the values of that
    plan's options (``{"onnxruntime_cpu": {"graph_optimization_level": "basic"}}``);
    unknown plans or options and ill-typed values are refused before anything is built
    (``dlopt providers --options PLAN`` lists a plan's options).

    ``isolation``: ``"in_process"`` (the default) runs every provider in the caller's
    process: quick, and what tests and notebooks use, but a provider that segfaults,
    aborts or calls ``os._exit`` takes the caller down with it, and a build or call that
    hangs holds the selection forever (a hung probe is abandoned in a background thread).
    ``"process"`` runs the selection in a supervised worker process (docs/isolation.md):
    a crash or hang there rejects that plan (``crashed`` or ``hung`` in the report) and
    the selection resumes without it. The watchdogs of the isolated mode:
    ``build_timeout_s`` caps one build (and a plan's first call, which may compile);
    a later call may take ``call_timeout_factor`` times that plan's fastest call, and
    never less than ``call_timeout_floor_s``.

    ``plan_cache_dir``: keep decisions in this directory, keyed by everything that can
    change them, and serve a matching one again after revalidating it (docs/cache.md);
    ``reuse_cached_plan=False`` races anyway and refreshes the record.

    ``time_budget_s``: wall seconds from ``select`` to the decision, probes, builds, first
    calls, validation and the race included (docs/selection.md, "Decision time"). When it
    ends, the best plan confirmed so far serves (the confidence gate still applies); plans
    it left no room for are reported with their expected value. ``"auto"`` (default):
    :func:`auto_time_budget` of one reference call of every case; ``None``: no budget. Plans are
    built in order of expected gain per second (their priors), and a plan whose prior
    cannot beat the confirmed leader is not built; ``exhaustive=True`` builds every plan
    and races it, with no budget.

    ``on_unseen_signature``: what the decision does with a call whose signature (shapes,
    dtypes, devices, structure) no raced case had, unless its plan serves dynamic shapes
    and passed the held-out check: ``"fallback"`` (default) serves it with eager fp32
    and warns once, ``"raise"`` raises :class:`~dlopt.errors.UnseenSignatureError`
    (docs/serving.md).

    The production guard (docs/serving.md, "In production"; :class:`GuardPolicy` says
    each field whole): ``on_nonfinite_input`` (``"fallback"``, ``"raise"`` or
    ``"serve"``) for a call whose floating inputs hold NaN or infinity;
    ``on_plan_failure`` (``"fallback"`` or ``"raise"``) for a plan that raises at serve
    time, disabled after ``max_failures`` consecutive failures; ``shadow_rate``, the share
    of calls eager fp32 also runs in the background to compare (0 = off; 0.01 in
    production), disabling the plan after ``max_mismatches`` mismatches. Like
    ``on_unseen_signature`` they say how the decision serves, not what it decides: they
    are not part of the plan cache's key.
    """

    objective: Objective = field(
        default=Objective.STEADY_STATE_LATENCY,
        converter=lambda v: Objective.lookup(v) or v,
        validator=one_of(OBJECTIVES),
    )
    constraints: DeploymentConstraints = field(
        factory=DeploymentConstraints, validator=instance_of(DeploymentConstraints)
    )
    measurement: MeasurementPolicy = field(
        factory=MeasurementPolicy, validator=instance_of(MeasurementPolicy)
    )
    quality: QualityPolicy = field(factory=QualityPolicy, validator=instance_of(QualityPolicy))
    include: tuple[str, ...] | None = field(default=None, converter=_names, validator=_check_names)
    exclude: tuple[str, ...] = field(
        default=(), converter=lambda v: _names(v) or (), validator=_check_names
    )
    probe_timeout_s: float = field(
        factory=default_probe_timeout_s,
        validator=number(minimum=0, maximum=MAX_PROBE_TIMEOUT_S, low_open=True, hint=" (seconds)"),
    )
    plan_options: dict[str, dict[str, Any]] = field(
        factory=dict, converter=lambda v: v, validator=lambda _i, _a, v: _check_plan_options(v)
    )
    isolation: str = field(default="in_process", validator=one_of(ISOLATION_MODES))
    build_timeout_s: float = field(
        default=600.0, validator=number(minimum=0, low_open=True, hint=" (seconds)")
    )
    call_timeout_factor: float = field(
        default=50.0, validator=number(minimum=1, hint=" (times the plan's fastest call)")
    )
    call_timeout_floor_s: float = field(
        default=10.0, validator=number(minimum=0, low_open=True, hint=" (seconds)")
    )
    plan_cache_dir: str | None = field(default=None, converter=_cache_dir)
    reuse_cached_plan: bool = field(default=True, validator=boolean())
    time_budget_s: float | str | None = field(default="auto", validator=_check_budget)
    exhaustive: bool = field(default=False, validator=boolean())
    on_unseen_signature: UnseenSignature = field(
        default=UnseenSignature.FALLBACK,
        converter=lambda v: UnseenSignature.lookup(v) or v,
        validator=one_of(u.value for u in UnseenSignature),
    )

    on_nonfinite_input: NonFiniteInput = guard_field("on_nonfinite_input")  # noqa: RUF009
    on_plan_failure: PlanFailure = guard_field("on_plan_failure")  # noqa: RUF009
    max_failures: int = guard_field("max_failures")
    shadow_rate: float = guard_field("shadow_rate")
    max_mismatches: int = guard_field("max_mismatches")

    @property
    def guard(self) -> GuardPolicy:
        """The production guard these fields ask for."""
        return GuardPolicy.of(self)

    def wants(self, provider_name: str) -> bool:
        if provider_name in self.exclude:
            return False
        return self.include is None or provider_name in self.include


user_document(OptimizationPolicy)


def check_plan_names(policy: OptimizationPolicy, registered: Iterable[str]) -> None:
    """Refuse ``include``/``exclude`` names that match no registered plan (typos).

    ``registered`` is every plan name offered by the loaded plugins (and explicit
    providers), available on this machine or not: a plan that is registered but
    unavailable here stays allowed, so one config serves several machines. The error
    names each unknown name with the closest registered ones (difflib).
    """
    known = sorted(set(registered))
    problems: list[str] = []
    for what, names in (("include", policy.include or ()), ("exclude", policy.exclude)):
        for name in names:
            if name in known:
                continue
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(map(repr, close))}?" if close else "no close match"
            problems.append(f"{what} names {name!r}, which matches no registered plan ({hint})")
    if problems:
        raise ConfigurationError(
            "; ".join(problems)
            + f". registered plans: {', '.join(known) or 'none'} (see `dlopt providers`)"
        )


def _check_plan_options(value: object) -> None:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Mapping) for k, v in value.items()
    ):
        raise ConfigurationError(
            "plan_options must map plan names to dicts of option values, e.g. "
            f'{{"onnxruntime_cpu": {{"intra_op_threads": 2}}}}; got {value!r}'
        )


@frozen
class OptionInfo:
    """One declared plan option, for ``dlopt providers --options`` and the docs."""

    name: str
    type: str
    default: Any
    help: str


def describe_options(options_type: type | None) -> list[OptionInfo]:
    """The options an attrs ``options_type`` declares (help from ``metadata["help"]``)."""
    import attrs

    if options_type is None:
        return []
    described = []
    for a in attrs.fields(options_type):
        default = a.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory()
        kind = a.type if isinstance(a.type, str) else getattr(a.type, "__name__", str(a.type))
        described.append(OptionInfo(a.name, str(kind), default, str(a.metadata.get("help", ""))))
    return described


def structure_options(options_type: type, values: Mapping[str, Any], *, plan: str) -> Any:
    """An instance of ``options_type`` from the user's ``values`` (defaults for the rest).

    Unknown names and values of the wrong type are a ConfigurationError naming the plan,
    the option and what it takes.
    """
    from dlopt.platform.serialization import converter

    known = {o.name: o for o in describe_options(options_type)}
    unknown = [k for k in values if k not in known]
    if unknown:
        listing = "; ".join(f"{o.name} ({o.type}, default {o.default!r})" for o in known.values())
        raise ConfigurationError(
            f"plan {plan!r} has no option {', '.join(map(repr, unknown))}; its options: "
            f"{listing or 'none'}"
        )
    try:
        return converter.structure(dict(values), options_type)
    except Exception as exc:
        details = _first_leaf(exc)
        raise ConfigurationError(
            f"plan {plan!r}: bad option value ({details}); options: "
            + "; ".join(f"{o.name}: {o.type}" for o in known.values())
        ) from None


def _first_leaf(exc: BaseException) -> str:
    """The innermost message of a cattrs error group (or the error itself)."""
    inner = getattr(exc, "exceptions", None)
    if inner:
        notes = getattr(inner[0], "__notes__", None) or [""]
        where = notes[0].rpartition("@ attribute ")[2]
        return (f"{where}: " if where else "") + _first_leaf(inner[0])
    return str(exc) if isinstance(exc, ConfigurationError) else f"{type(exc).__name__}: {exc}"
