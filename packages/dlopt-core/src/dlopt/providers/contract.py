"""The provider contract: what a plugin implements and what it hands back.

One :class:`ExecutionProvider` instance is one candidate plan. A plugin registers one
instance per plan variant it offers (TorchAO registers one per quantization scheme).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from attrs import define, field, frozen

from dlopt.precision import Precision
from dlopt.target import ExecutionTarget

if TYPE_CHECKING:
    import torch

    from dlopt.policy import OptimizationPolicy
    from dlopt.workload import WorkloadProfile

log = logging.getLogger(__name__)

#: The plugin API this core implements, as "MAJOR.MINOR". A plugin declares the version
#: it was written for; it is compatible when the majors match and its minor is not newer.
PLUGIN_API_VERSION = "1.0"


def api_version_problem(declared: object) -> str | None:
    """Why a plugin's declared API version cannot be used with this core, or ``None``."""
    if declared is None:
        return (
            "declares no DLOPT_PLUGIN_API_VERSION; set it to the dlopt plugin API "
            f"version the plugin was written for (this core implements {PLUGIN_API_VERSION})"
        )
    try:
        major, minor = (int(part) for part in str(declared).split("."))
        core_major, core_minor = (int(part) for part in PLUGIN_API_VERSION.split("."))
    except ValueError:
        return f"declares a malformed plugin API version {declared!r}; expected 'MAJOR.MINOR'"
    if major != core_major or minor > core_minor:
        return (
            f"written for plugin API {declared}, but this dlopt-core implements "
            f"{PLUGIN_API_VERSION}; install a dlopt-core / plugin pair with the same major "
            "version (upgrade whichever is older)"
        )
    return None


def _precision(value: str | Precision) -> Precision:
    return Precision.parse(value)


@frozen
class ProviderAvailability:
    """Whether a provider can build on the target, and if not, why and how to fix it.

    ``sdk_versions`` maps distribution names to the versions seen (``None`` when absent);
    ``details`` carries capabilities a probe found (execution providers, compiler...) as
    JSON values (text, preferably). The loader normalises whatever a probe returns
    (``dlopt.providers.boundary.normalize_availability``) before anyone reads it.
    """

    available: bool
    reason: str | None = None
    install_hint: str | None = None
    sdk_versions: dict[str, str | None] = field(factory=dict)
    details: dict[str, Any] = field(factory=dict)

    @classmethod
    def ok(cls, reason: str | None = None, **kwargs: Any) -> ProviderAvailability:
        return cls(True, reason, **kwargs)

    @classmethod
    def unavailable(
        cls, reason: str, install_hint: str | None = None, **kwargs: Any
    ) -> ProviderAvailability:
        return cls(False, reason, install_hint, **kwargs)


@define
class ProviderContext:
    """What a provider gets to probe and build: target, policy, workload, artifact dir.

    ``workload`` is ``None`` during a plain probe (``dlopt providers``) and set during a
    race; providers use it for input shapes, dynamic axes and calibration.
    """

    target: ExecutionTarget = field(factory=ExecutionTarget)
    policy: OptimizationPolicy | None = None
    workload: WorkloadProfile | None = None
    artifact_dir: Path = field(factory=lambda: Path("dlopt-artifacts"), converter=Path)

    def plan_dir(self, plan_name: str) -> Path:
        """A directory owned by one plan inside the artifact directory (created).

        ``plan_name`` must be a plain name (never a path), and the directory must resolve
        inside ``artifact_dir`` (a link pointing elsewhere is refused): ConfigurationError.
        """
        from dlopt.errors import ConfigurationError
        from dlopt.providers.boundary import check_plan_name, is_inside

        path = self.artifact_dir / check_plan_name(plan_name)
        if not is_inside(path, self.artifact_dir):
            raise ConfigurationError(
                f"the directory of plan {plan_name!r}, {str(path)!r}, resolves outside the "
                f"artifact directory {str(self.artifact_dir)!r} (a link?); remove it or "
                "choose another artifact directory"
            )
        path.mkdir(parents=True, exist_ok=True)
        return path


@define(eq=False)
class BuiltPlan:
    """An executable plan: a runner callable plus what it computes in and what it made.

    ``runner`` takes the same ``*args, **kwargs`` as the model and returns the same
    structure. ``output_dtype`` declares that floating outputs come back in a lower
    precision dtype (validation upcasts them); ``None`` means they match the reference.
    ``artifacts`` names files the plan owns (engine, .onnx); ``metadata`` is JSON-able
    evidence for the report. ``close()`` releases sessions, engines and threads.
    """

    runner: Callable[..., Any]
    precision: Precision = field(default=Precision.FP32, converter=_precision)
    artifacts: dict[str, Path] = field(factory=dict)
    metadata: dict[str, Any] = field(factory=dict)
    output_dtype: torch.dtype | None = None
    on_close: Callable[[], None] | None = None
    closed: bool = field(default=False, init=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.runner(*args, **kwargs)

    def close(self) -> None:
        """Release resources once; errors while closing are logged, never raised."""
        if self.closed:
            return
        self.closed = True
        if self.on_close is not None:
            try:
                self.on_close()
            except Exception:  # closing must never take down a race
                log.warning("closing plan failed", exc_info=True)
        self.runner = _closed_runner

    def __enter__(self) -> BuiltPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _closed_runner(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this plan was closed; build it again to run it")


@runtime_checkable
class ExecutionProvider(Protocol):
    """One candidate plan offered by a plugin.

    Implementations keep ``__init__`` and ``probe`` cheap and import their SDK inside
    ``probe``/``build`` only. ``build`` must not modify ``model`` (copy what you change);
    dlopt hashes the weights before and after to check.
    """

    @property
    def name(self) -> str:
        """Unique plan name, e.g. ``"onnxruntime_cpu"``; used in reports and include/exclude."""
        ...

    @property
    def precision(self) -> Precision:
        """The precision the plan will declare when built (shown before building)."""
        ...

    def probe(self, context: ProviderContext) -> ProviderAvailability:
        """Say whether this plan can be built on ``context.target``; never raise."""
        ...

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        """Build the executable plan for ``model``; raise with a clear message on failure."""
        ...


@frozen
class ProviderInfo:
    """A registered provider and where it came from (plugin, distribution, version)."""

    provider: ExecutionProvider
    plugin: str
    distribution: str | None = None
    version: str | None = None

    @property
    def name(self) -> str:
        return self.provider.name


def describe_sdk_versions(versions: Mapping[str, str | None]) -> str:
    """``"onnxruntime 1.20.1, onnx -"`` for tables."""
    return ", ".join(f"{k} {v or '-'}" for k, v in versions.items())
