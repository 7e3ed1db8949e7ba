"""The fleet spec: which models race on which machine kinds, and where results land.

A TOML file, read strictly: an unknown key is refused naming the closest known one, a bad
value names its TOML path (``jobs[1].policy.constraints.min_speedup``), and a model given
as ``module:factory`` is refused unless the user consented on the command line
(``--allow-spec-imports``): nothing read from a file is imported by default. All of it is
checked before anything is scheduled. This module never imports Ray.

::

    name = "serving"                       # results under STORE/fleet/serving/
    store = "/shared/dlopt-store"          # a directory, or an fsspec URL (s3://...)

    [kinds.cpu_amx]
    resources = { cpu_amx = 1 }            # a Ray resource set...
    [kinds.h200]
    labels = { "ray.io/accelerator-type" = "H200" }   # ...or a Ray label selector
    device = "cuda"

    [[jobs]]
    name = "demo"
    model = "demo_convnet"                 # a dlopt.models entry point
    kinds = ["cpu_amx", "h200"]
    policy = { include = ["eager_fp32", "native_channels_last"] }
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs
from attrs import field, frozen
from cattrs.errors import (
    AttributeValidationNote,
    ForbiddenExtraKeysError,
    IterableValidationNote,
)

from dlopt.errors import ConfigurationError
from dlopt.fleet.factories import model_factory
from dlopt.platform.names import NAME_RULE, is_plain_name
from dlopt.platform.serialization import converter as _base_converter

#: The per-node resource every race asks for one unit of: each node advertises exactly
#: one, so at most one race runs on a node at a time (races are timing-sensitive).
RACE_RESOURCE = "dlopt_race"
#: Policy fields the fleet sets itself: every race is isolated and stores its record in
#: the spec's result store.
FLEET_SET_POLICY_FIELDS = ("isolation", "plan_cache_dir")
_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "uint8", "bool")
_DEVICE = re.compile(r"(cpu|cuda|xpu|mps|hpu|npu|privateuseone)(:\d+)?")


class _FieldError(ConfigurationError):
    """A bad value of one field, raised by its validator: reported at the field's path."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field_name = field_name


def _plain(what: str) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not is_plain_name(value):
            raise _FieldError(attribute.name, f"{value!r} is not a plain {what} name: {NAME_RULE}")

    return check


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise _FieldError(attribute.name, f"must be > 0, got {value!r}")


@frozen
class CaseShape:
    """One workload case as the spec writes it: random inputs of a shape, seeded."""

    name: str = field(validator=_plain("case"))
    shape: tuple[int, ...] = field()
    dtype: str = field(default="float32")
    weight: float = field(default=1.0, validator=_positive)

    @shape.validator
    def _check_shape(self, _attribute: object, value: tuple[int, ...]) -> None:
        if not value or any(d <= 0 for d in value):
            raise _FieldError(
                "shape", f"must be a list of sizes > 0 (e.g. [1, 3, 224, 224]), got {list(value)}"
            )

    @dtype.validator
    def _check_dtype(self, _attribute: object, value: str) -> None:
        if value not in _DTYPES:
            raise _FieldError(
                "dtype",
                f"{value!r} is not a dtype dlopt generates inputs for: {', '.join(_DTYPES)}",
            )


@frozen
class MachineKind:
    """A kind of machine: the Ray node labels (a label selector) or custom resources a
    node of this kind has, and the device its races target."""

    labels: dict[str, str] = field(factory=dict)
    resources: dict[str, float] = field(factory=dict)
    device: str = "cpu"

    def __attrs_post_init__(self) -> None:
        if bool(self.labels) == bool(self.resources):
            raise ConfigurationError(
                "give a machine kind either labels (a Ray label selector, e.g. labels = "
                '{ "ray.io/accelerator-type" = "H200" }) or resources (e.g. resources = '
                "{ cpu_amx = 1 }), not both and not neither"
            )
        if RACE_RESOURCE in self.resources:
            raise ConfigurationError(
                f"{RACE_RESOURCE!r} is the fleet's own per-node race resource: every race "
                "asks for one unit of it; remove it from the kind's resources"
            )
        bad = [name for name, amount in self.resources.items() if not amount > 0]
        if bad:
            raise ConfigurationError(f"resources {', '.join(bad)} must be amounts > 0")
        if not _DEVICE.fullmatch(self.device):
            raise ConfigurationError(
                f"device {self.device!r} is not a torch device such as 'cpu' or 'cuda'"
            )


@frozen
class FleetJob:
    """One model to qualify: its factory, its workload (unless the factory returns one),
    the policy (``OptimizationPolicy``'s fields) and the machine kinds to race it on."""

    name: str = field(validator=_plain("job"))
    model: str
    kinds: tuple[str, ...]
    policy: dict[str, Any] = field(factory=dict)
    workload: tuple[CaseShape, ...] = ()
    #: Explicit providers as ``module:Class`` (built with no arguments): imports named in
    #: a file, so only with ``--allow-spec-imports``.
    providers: tuple[str, ...] = ()
    #: torch's thread count for the race; serving processes set the same
    #: (``ExecutionTarget(threads=...)``): it is part of the cache key.
    threads: int | None = field(default=None, validator=_positive)


@frozen
class FleetSpec:
    """A whole spec; :func:`load_spec` reads and checks one."""

    name: str = field(validator=_plain("spec"))
    store: str
    kinds: dict[str, MachineKind]
    jobs: tuple[FleetJob, ...]
    #: Where it was read from (not part of the TOML).
    source: str | None = None

    def job(self, name: str) -> FleetJob:
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)

    def pairs(self) -> list[tuple[FleetJob, str]]:
        """Every (job, machine kind) to qualify, in the spec's order."""
        return [(job, kind) for job in self.jobs for kind in job.kinds]


@frozen
class ResolvedJob:
    """A job ready to schedule: its model as the ``module:factory`` the race imports."""

    job: FleetJob
    factory: str


def _strict_str(value: Any, _: object) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(f"expected text, got {value!r}")
    return value


# dlopt's converter (strict numbers and booleans), refusing keys the spec does not know.
_converter = _base_converter.copy(forbid_extra_keys=True, detailed_validation=True)
_converter.register_structure_hook(str, _strict_str)


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the fleet extra installs tomli on 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigurationError(f"fleet spec {path} does not exist") from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read the fleet spec {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None


def read_spec(path: str | Path) -> FleetSpec:
    """Read and check the spec at ``path`` without resolving its models (``status`` and
    ``report`` need no model): one ConfigurationError naming every bad field."""
    source = Path(path)
    return attrs.evolve(parse_spec(_read_toml(source), where=str(source)), source=str(source))


def load_spec(
    path: str | Path, *, allow_imports: bool = False
) -> tuple[FleetSpec, list[ResolvedJob]]:
    """:func:`read_spec`, then each job's model resolved (:func:`resolve_jobs`).
    ``allow_imports``: the user consented to ``module:factory`` models and ``providers``
    named in the file."""
    spec = read_spec(path)
    return spec, resolve_jobs(spec, allow_imports=allow_imports, where=str(path))


def parse_spec(data: Mapping[str, Any], *, where: str = "spec") -> FleetSpec:
    """The spec from its parsed TOML, structure and every value checked."""
    data = dict(data)
    if "source" in data:
        raise ConfigurationError(f"{where}: source: unknown key (dlopt sets it)")
    try:
        spec = _converter.structure(data, FleetSpec)
    except cattrs.BaseValidationError as exc:
        problems = [_describe(path, leaf) for path, leaf in _leaves(exc, "", data)]
        raise ConfigurationError(f"{where}: " + "; ".join(problems)) from None
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    problems = _check_references(spec)
    if problems:
        raise ConfigurationError(f"{where}: " + "; ".join(problems))
    return spec


def _check_references(spec: FleetSpec) -> list[str]:
    """Cross-field checks: kinds named by jobs exist, names are unique, policies parse."""
    problems: list[str] = []
    if not spec.jobs:
        problems.append("jobs: the spec has no [[jobs]]")
    for name in spec.kinds:
        if not is_plain_name(name):
            problems.append(f"kinds.{name}: not a plain machine kind name: {NAME_RULE}")
    seen: set[str] = set()
    for index, job in enumerate(spec.jobs):
        here = f"jobs[{index}]"
        if job.name in seen:
            problems.append(f"{here}.name: {job.name!r} names two jobs; give each its own")
        seen.add(job.name)
        if not job.kinds:
            problems.append(f"{here}.kinds: name at least one machine kind")
        for k, kind in enumerate(job.kinds):
            if kind not in spec.kinds:
                close = difflib.get_close_matches(kind, list(spec.kinds), n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(
                    f"{here}.kinds[{k}]: {kind!r} is not a machine kind of this spec{hint}; "
                    f"its kinds: {', '.join(spec.kinds) or 'none (add a [kinds.NAME] table)'}"
                )
        fleet_set = [f for f in FLEET_SET_POLICY_FIELDS if f in job.policy]
        if fleet_set:
            problems.append(
                f"{here}.policy: {', '.join(fleet_set)} are set by the fleet (every race is "
                "isolated and stores its record in the spec's store); remove them"
            )
            continue
        try:
            read_policy(job.policy)
        except ConfigurationError as exc:
            problems.append(f"{here}.policy: {exc}")
    return problems


def read_policy(values: Mapping[str, Any]) -> Any:
    """``OptimizationPolicy`` from the spec's table, through the same strict document
    reader as every policy dlopt reads (unknown keys refused with the closest name)."""
    from dlopt.platform.serialization import from_jsonable
    from dlopt.settings.policy import OptimizationPolicy

    try:
        return from_jsonable(dict(values), OptimizationPolicy)
    except ConfigurationError:
        raise
    except cattrs.BaseValidationError as exc:
        leaves = [_describe(path, leaf) for path, leaf in _leaves(exc, "", values)]
        raise ConfigurationError("; ".join(leaves)) from None


def job_policy(table: Mapping[str, Any], cache_dir: str) -> Any:
    """A job's ``OptimizationPolicy`` (its ``policy`` table), isolated and caching in
    ``cache_dir``."""
    policy = read_policy(table)
    return attrs.evolve(policy, isolation="process", plan_cache_dir=cache_dir)


def resolve_jobs(spec: FleetSpec, *, allow_imports: bool, where: str = "spec") -> list[ResolvedJob]:
    """Each job's model as a ``module:factory``: a ``dlopt.models`` name is looked up in
    the installed metadata; a ``module:factory`` (and any explicit provider) needs
    ``allow_imports`` and is then imported here, so a typo fails before scheduling."""
    from dlopt.isolation.transfer import resolve_reference

    problems: list[str] = []
    resolved: list[ResolvedJob] = []
    for index, job in enumerate(spec.jobs):
        here = f"jobs[{index}]"
        refs = [(f"{here}.model", job.model)] if ":" in job.model else []
        refs += [(f"{here}.providers[{i}]", ref) for i, ref in enumerate(job.providers)]
        if refs and not allow_imports:
            problems.extend(
                f"{field_path}: {ref!r} is a module:qualname reference, and dlopt imports "
                "no code named in a file by default. Register the factory under the "
                '"dlopt.models" entry points of an installed distribution and name it '
                '(providers register through "dlopt.providers"), or pass '
                "--allow-spec-imports to consent to importing it (docs/fleet.md)"
                for field_path, ref in refs
            )
            continue
        failed = False
        for field_path, ref in refs:
            if not _REFERENCE.fullmatch(ref):
                problems.append(f"{field_path}: {ref!r} is not a module:qualname reference")
                failed = True
                continue
            try:
                resolve_reference(ref)
            except ConfigurationError as exc:
                problems.append(f"{field_path}: {exc}")
                failed = True
        if failed:
            continue
        if ":" in job.model:
            resolved.append(ResolvedJob(job, job.model))
            continue
        try:
            resolved.append(ResolvedJob(job, model_factory(job.model, f"{here}.model")))
        except ConfigurationError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigurationError(f"{where}: " + "; ".join(problems))
    return resolved


# -- cattrs errors as TOML paths -----------------------------------------------------


def _leaves(exc: BaseException, path: str, data: Any) -> Any:
    """``(path, error)`` for each error cattrs collected, with its TOML path."""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            path = f"{path}.{note.name}" if path else note.name
        elif isinstance(note, IterableValidationNote):
            index = note.index
            path = f"{path}[{index!r}]" if isinstance(index, int) else f"{path}.{index}"
    subs = getattr(exc, "exceptions", None)
    if isinstance(exc, cattrs.BaseValidationError) and subs:
        for sub in subs:
            yield from _leaves(sub, path, data)
    else:
        yield path, exc


def _describe(path: str, error: BaseException) -> str:
    where = path or "spec"
    if isinstance(error, ForbiddenExtraKeysError):
        known = [a.name for a in attrs.fields(error.cl) if a.name != "source"]
        parts = []
        for key in sorted(error.extra_fields):
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            full = f"{path}.{key}" if path else key
            parts.append(f"{full}: unknown key{hint}; {error.cl.__name__} takes {', '.join(known)}")
        return "; ".join(parts)
    if isinstance(error, KeyError):
        return f"{where}: missing (required)"
    if isinstance(error, _FieldError):
        return f"{path + '.' if path else ''}{error.field_name}: {error}"
    if isinstance(error, ConfigurationError):
        return f"{where}: {error}"
    if isinstance(error, (TypeError, ValueError)):
        return f"{where}: wrong type or value ({error})"
    return f"{where}: {type(error).__name__}: {error}"
