"""The fleet spec: which models race on which machine kinds, and where results land.

A TOML file (a regular file of at most 4 MiB), read strictly: an unknown key is refused
naming the closest known one, a bad value names its TOML path
(``jobs[1].policy.constraints.min_speedup``), a bare string where a list goes is refused,
never split into letters, and a model given as ``module:factory`` is refused unless the
user consented on the command line (``--allow-spec-imports``): nothing read from a file is
imported by default. What ``dlopt select`` refuses about a race (shapes torch cannot
index, weights that overflow, a store that cannot be written) is refused here too. All of
it is checked before anything is scheduled, and every problem is reported at once, in the
spec's order. This module never imports Ray.

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
import math
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
from dlopt.platform.fileio import FileTooLargeError, read_bytes_capped
from dlopt.platform.names import NAME_RULE, is_plain_name
from dlopt.platform.serialization import check_document, user_document
from dlopt.platform.serialization import converter as _base_converter
from dlopt.platform.sizes import shape_fault, weights_overflow

#: The per-node resource every race asks for one unit of: each node advertises exactly
#: one, so at most one race runs on a node at a time (races are timing-sensitive).
RACE_RESOURCE = "dlopt_race"
#: Policy fields the fleet sets itself: every race is isolated and stores its record in
#: the spec's result store.
FLEET_SET_POLICY_FIELDS = ("isolation", "plan_cache_dir")
_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "uint8", "bool")
_DEVICE = re.compile(r"(cpu|cuda|xpu|mps|hpu|npu|privateuseone)(:\d+)?")
#: The most bytes a spec may have: a spec is a short TOML file, and reading stops here.
SPEC_MAX_BYTES = 4 * 2**20
#: Ray's limits on a resource amount: at most this much, in steps of 1/10000.
_MAX_RESOURCE = 100e12
_RESOURCE_STEP = 1e-4
#: Ray's (Kubernetes') label syntax: a name of up to 63 characters, letters and digits at
#: both ends, ``-``, ``_`` and ``.`` inside; a key may have a DNS-style ``prefix/``.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*/)?{_LABEL}")
_LABEL_VALUE = re.compile(rf"!?(?:(?:in|!in)?\({_LABEL}(?:, ?{_LABEL})*\)|{_LABEL})")


class _FieldError(ConfigurationError):
    """Bad values of fields of one value, raised by its checks: each reported at its
    field's path (``jobs[0].workload[1].shape: ...``)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{name}: {message}" for name, message in problems))
        self.problems = problems


def _plain(what: str) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not is_plain_name(value):
            raise _FieldError(
                [(attribute.name, f"{value!r} is not a plain {what} name: {NAME_RULE}")]
            )

    return check


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise _FieldError([(attribute.name, f"must be a finite number > 0, got {value!r}")])


@frozen
class CaseShape:
    """One workload case as the spec writes it: random inputs of a shape, seeded."""

    name: str = field(validator=_plain("case"))
    shape: tuple[int, ...] = field()
    dtype: str = field(default="float32")
    weight: float = field(default=1.0)

    def __attrs_post_init__(self) -> None:
        problems = []
        fault = shape_fault(self.shape) if self.shape else "is empty: give the sizes, e.g. [1, 64]"
        if fault is not None:
            problems.append(("shape", f"{list(self.shape)} {fault}"))
        if self.dtype not in _DTYPES:
            problems.append(
                (
                    "dtype",
                    f"{self.dtype!r} is not a dtype dlopt generates inputs for: "
                    f"{', '.join(_DTYPES)}",
                )
            )
        if not (self.weight > 0 and math.isfinite(self.weight)):
            problems.append(
                ("weight", f"must be a finite number > 0 (a share of traffic), got {self.weight!r}")
            )
        if problems:
            raise _FieldError(problems)


@frozen
class MachineKind:
    """A kind of machine: the Ray node labels (a label selector) or custom resources a
    node of this kind has, and the device its races target."""

    labels: dict[str, str] = field(factory=dict)
    resources: dict[str, float] = field(factory=dict)
    device: str = "cpu"

    def __attrs_post_init__(self) -> None:
        problems = _kind_problems(self)
        if problems:
            raise _FieldError(problems)


def _kind_problems(kind: MachineKind) -> list[tuple[str, str]]:
    """Every problem of one machine kind, by field: what Ray would refuse, or take to mean
    something else, is refused here, before Ray starts."""
    problems: list[tuple[str, str]] = []
    if bool(kind.labels) == bool(kind.resources):
        problems.append(
            (
                "labels",
                "give a machine kind either labels (a Ray label selector, e.g. labels = "
                '{ "ray.io/accelerator-type" = "H200" }) or resources (e.g. resources = '
                "{ cpu_amx = 1 }), not both and not neither",
            )
        )
    for name, amount in kind.resources.items():
        where = f"resources.{name}"
        if name == RACE_RESOURCE:
            problems.append(
                (
                    where,
                    f"{RACE_RESOURCE!r} is the fleet's own per-node race resource: every race "
                    "asks for one unit of it; remove it from the kind's resources",
                )
            )
        elif not name.strip():
            problems.append((where, "a resource needs a name"))
        elif not (math.isfinite(amount) and _RESOURCE_STEP <= amount <= _MAX_RESOURCE):
            problems.append(
                (where, f"must be an amount from 0.0001 to 1e14 (Ray's limits), got {amount!r}")
            )
        elif abs(round(amount / _RESOURCE_STEP) * _RESOURCE_STEP - amount) > 1e-9 * amount:
            problems.append((where, f"Ray counts resources in steps of 0.0001, got {amount!r}"))
    for key, value in kind.labels.items():
        if not _LABEL_KEY.fullmatch(key):
            problems.append(
                (
                    f"labels.{key}",
                    "is not a Ray label key (letters, digits, -_. and an optional prefix/)",
                )
            )
        elif not _LABEL_VALUE.fullmatch(value):
            problems.append(
                (
                    f"labels.{key}",
                    f"{value!r} is not a Ray label selector value: a value of up to 63 "
                    "letters, digits and -_., or !value, in(a,b), !in(a,b)",
                )
            )
    if not _DEVICE.fullmatch(kind.device):
        problems.append(
            ("device", f"{kind.device!r} is not a torch device such as 'cpu' or 'cuda'")
        )
    return problems


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
# The spec's tables are documents a user writes: checked whole, every problem by its path.
for _document in (CaseShape, MachineKind, FleetJob, FleetSpec):
    user_document(_document)


def _read_toml(path: Path) -> dict[str, Any]:
    """The spec's TOML, read as every file dlopt reads: a regular file only (a FIFO or a
    device such as /dev/zero is refused before it is read), at most
    :data:`SPEC_MAX_BYTES`."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the fleet extra installs tomli on 3.10
        import tomli as tomllib
    try:
        raw = read_bytes_capped(path, SPEC_MAX_BYTES)
    except FileNotFoundError:
        raise ConfigurationError(f"fleet spec {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigurationError(
            f"fleet spec {path} is a directory; give the path of a TOML file"
        ) from None
    except FileTooLargeError:
        raise ConfigurationError(
            f"fleet spec {path} is larger than {SPEC_MAX_BYTES // 2**20} MiB, far more than a "
            "spec needs; check the path"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the fleet spec {path}: {exc.strerror or exc}"
        ) from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigurationError(f"{path} is not UTF-8 text, so not a TOML spec") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None


def read_spec(path: str | Path) -> FleetSpec:
    """Read and check the spec at ``path`` without resolving its models (``status`` and
    ``report`` need no model), and its store as a place to read results from: one
    ConfigurationError naming every problem."""
    return _checked(Path(path), writable_store=False, resolve=False)[0]


def load_spec(
    path: str | Path, *, allow_imports: bool = False
) -> tuple[FleetSpec, list[ResolvedJob]]:
    """Read and check the spec at ``path`` for a run: every field, its store as a place
    the results can be written, and each job's model (:func:`resolve_jobs`), every
    problem in one ConfigurationError. ``allow_imports``: the user consented to
    ``module:factory`` models and ``providers`` named in the file."""
    return _checked(Path(path), writable_store=True, resolve=True, allow_imports=allow_imports)


def _checked(
    source: Path, *, writable_store: bool, resolve: bool, allow_imports: bool = False
) -> tuple[FleetSpec, list[ResolvedJob]]:
    from dlopt.fleet.result_store import store_problems

    data = _read_toml(source)
    spec, problems, models = _parse(data)
    store = data.get("store")
    if isinstance(store, str) and store.strip():
        problems += store_problems(store, writable=writable_store)
    resolved: list[ResolvedJob] = []
    factories: dict[int, str] = {}
    if resolve:
        factories, unresolved = _resolve(models, allow_imports=allow_imports)
        problems += unresolved
    if problems or spec is None:
        raise ConfigurationError(f"{source}: " + "; ".join(_in_spec_order(problems)))
    if resolve:
        resolved = [ResolvedJob(job, factories[index]) for index, job in enumerate(spec.jobs)]
    return attrs.evolve(spec, source=str(source)), resolved


def parse_spec(data: Mapping[str, Any], *, where: str = "spec") -> FleetSpec:
    """The spec from its parsed TOML, structure and every value checked: one
    ConfigurationError naming every problem, each at its TOML path."""
    spec, problems, _ = _parse(data)
    if problems or spec is None:
        raise ConfigurationError(f"{where}: " + "; ".join(problems))
    return spec


def _parse(data: Any) -> tuple[FleetSpec | None, list[str], list[_JobModel]]:
    """The spec (``None`` when it has problems), every problem, and each job's model and
    providers as written (they can be checked even where the rest of the job is bad)."""
    if not isinstance(data, Mapping):
        return None, ["a fleet spec is a TOML table of name, store, kinds and jobs"], []
    shape_problems, cleaned = check_document(data, FleetSpec)
    problems = list(shape_problems)
    if "source" in data:
        problems.append("source: unknown key (dlopt sets it)")
    problems += [
        f"{key}: missing (required)"
        for key in ("name", "store", "kinds", "jobs")
        if key not in data
    ]
    name, store = cleaned.get("name"), cleaned.get("store")
    if "name" in cleaned and not is_plain_name(name):
        problems.append(f"name: {name!r} is not a plain spec name: {NAME_RULE}")
    if "store" in cleaned and not (isinstance(store, str) and store.strip()):
        problems.append(
            f"store: {store!r} is not a place for results: give a directory every node can "
            "reach, or a URL such as s3://bucket/dlopt"
        )
    # Structured from what the shape check left: a value it named is not named again.
    named = [p.partition(": ")[0] for p in shape_problems]
    structure_problems: list[str] = []
    kinds = _parse_kinds(cleaned.get("kinds", {}), structure_problems)
    declared = list(cleaned["kinds"]) if isinstance(cleaned.get("kinds"), Mapping) else []
    raw_jobs: list[Any] = data["jobs"] if isinstance(data.get("jobs"), list) else []
    if "jobs" in data and isinstance(data["jobs"], list) and not raw_jobs:
        problems.append("jobs: the spec has no [[jobs]]")
    jobs: list[FleetJob] = []
    models: list[_JobModel] = []
    seen: set[str] = set()
    for index, (raw, kept) in enumerate(zip(raw_jobs, cleaned.get("jobs", []))):
        if not isinstance(raw, Mapping):
            continue  # the shape check named it
        here = f"jobs[{index}]"
        job = _structure(kept, FleetJob, here, structure_problems)
        if job is not None:
            jobs.append(job)
        job_name = raw.get("name")
        if isinstance(job_name, str):
            if job_name in seen:
                problems.append(f"{here}.name: {job_name!r} names two jobs; give each its own")
            seen.add(job_name)
        problems += _job_kind_problems(raw.get("kinds"), declared, here)
        problems += _job_policy_problems(raw.get("policy"), raw.get("workload"), here)
        problems += _job_weight_problems(raw.get("workload"), here)
        model, providers = raw.get("model"), raw.get("providers", [])
        if isinstance(model, str) and isinstance(providers, list):
            models.append(
                _JobModel(index, model, tuple(p for p in providers if isinstance(p, str)))
            )
    problems += [p for p in structure_problems if not _under(p.partition(": ")[0], named)]
    if problems:
        return None, _in_spec_order(problems), models
    spec = FleetSpec(name=name, store=store, kinds=kinds, jobs=tuple(jobs))
    return spec, problems, models


@frozen
class _JobModel:
    """A job's model and explicit providers as the spec writes them, by job index."""

    index: int
    model: str
    providers: tuple[str, ...] = ()


def _under(path: str, named: list[str]) -> bool:
    """Whether ``path`` is one of ``named`` or inside one (``a.b[0]`` is inside ``a.b``)."""
    return any(path == p or path.startswith((f"{p}.", f"{p}[")) for p in named)


def _job_weight_problems(workload: Any, here: str) -> list[str]:
    """The traffic weights of a job's cases, as written: refused when they overflow when
    summed (each weight alone is checked with its case)."""
    if not isinstance(workload, list):
        return []
    weights = [
        float(case["weight"])
        for case in workload
        if isinstance(case, Mapping)
        and isinstance(case.get("weight"), (int, float))
        and not isinstance(case.get("weight"), bool)
        and math.isfinite(case["weight"])
    ]
    if not weights or not weights_overflow(weights):
        return []
    return [
        f"{here}.workload: the weights overflow when summed (largest {max(weights):g}); "
        "weights are relative shares of traffic: scale them down, e.g. to percentages"
    ]


def _parse_kinds(raw: Any, problems: list[str]) -> dict[str, MachineKind]:
    kinds: dict[str, MachineKind] = {}
    if not isinstance(raw, Mapping):
        problems.append(f"kinds: expected a table of machine kinds ([kinds.NAME]), got {raw!r}")
        return kinds
    for name, value in raw.items():
        if not is_plain_name(name):
            problems.append(f"kinds.{name}: not a plain machine kind name: {NAME_RULE}")
            continue
        kind = _structure(value, MachineKind, f"kinds.{name}", problems)
        if kind is not None:
            kinds[name] = kind
    return kinds


def _structure(value: Any, cls: type[Any], path: str, problems: list[str]) -> Any:
    """``value`` structured as ``cls``, or ``None`` with its problems added, by path."""
    try:
        return _converter.structure(value, cls)
    except cattrs.BaseValidationError as exc:
        for where, leaf in _leaves(exc, path, value):
            problems.extend(_described(where, leaf))
    except ConfigurationError as exc:
        problems.extend(_described(path, exc))
    return None


def _described(path: str, error: BaseException) -> list[str]:
    """:func:`_describe`, one problem per field of a :class:`_FieldError`."""
    if isinstance(error, _FieldError):
        prefix = f"{path}." if path else ""
        return [f"{prefix}{name}: {message}" for name, message in error.problems]
    return [_describe(path, error)]


def _in_spec_order(problems: list[str]) -> list[str]:
    """``problems`` in the order of the spec: name, store, kinds, then each job in turn
    (found in several passes, they are read best where they are in the file)."""
    sections = ("name", "store", "source", "kinds", "jobs")

    def rank(problem: str) -> tuple[int, int]:
        path = problem.partition(": ")[0]
        head = re.match(r"[A-Za-z_]+", path)
        section = sections.index(head.group(0)) if head and head.group(0) in sections else 5
        job = re.match(r"jobs\[(\d+)\]", path)
        return section, int(job.group(1)) if job else -1

    return sorted(problems, key=rank)


def _job_kind_problems(kinds: Any, declared: list[str], here: str) -> list[str]:
    """The machine kinds a job names: at least one, each declared in ``[kinds]``."""
    if not isinstance(kinds, list):
        return []  # its type is named where the job is structured
    if not kinds:
        return [f"{here}.kinds: name at least one machine kind"]
    problems = []
    for k, kind in enumerate(kinds):
        if isinstance(kind, str) and kind not in declared:
            close = difflib.get_close_matches(kind, declared, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(
                f"{here}.kinds[{k}]: {kind!r} is not a machine kind of this spec{hint}; "
                f"its kinds: {', '.join(declared) or 'none (add a [kinds.NAME] table)'}"
            )
    return problems


def _job_policy_problems(policy: Any, workload: Any, here: str) -> list[str]:
    """A job's policy, read as strictly as every policy document, and refused where the
    fleet sets the field or the job's own workload cannot serve the objective."""
    if not isinstance(policy, Mapping):
        return []  # its type is named where the job is structured
    fleet_set = [f for f in FLEET_SET_POLICY_FIELDS if f in policy]
    if fleet_set:
        return [
            f"{here}.policy: {', '.join(fleet_set)} are set by the fleet (every race is "
            "isolated and stores its record in the spec's store); remove them"
        ]
    from dlopt.settings.policy import OptimizationPolicy
    from dlopt.vocabulary import Objective

    shape_problems, _ = check_document(policy, OptimizationPolicy)
    if shape_problems:
        return [f"{here}.policy.{problem}" for problem in shape_problems]
    try:
        read = read_policy(policy)
    except ConfigurationError as exc:
        return [f"{here}.policy: {exc}"]

    if read.objective is Objective.MAX_THROUGHPUT and workload:
        return [
            f"{here}.policy.objective: 'max_throughput' races one request at several batch "
            "sizes, which [[jobs.workload]] cases cannot describe: leave them out and return "
            "a batched workload from the model's factory (WorkloadProfile.batched)"
        ]
    return []


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
    models = [_JobModel(i, job.model, job.providers) for i, job in enumerate(spec.jobs)]
    factories, problems = _resolve(models, allow_imports=allow_imports)
    if problems:
        raise ConfigurationError(f"{where}: " + "; ".join(problems))
    return [ResolvedJob(job, factories[index]) for index, job in enumerate(spec.jobs)]


def _resolve(models: list[_JobModel], *, allow_imports: bool) -> tuple[dict[int, str], list[str]]:
    """Each job's model as the ``module:factory`` its race imports, by job index, and
    every problem: a reference without consent, one that does not import, a name no
    installed distribution registered."""
    from dlopt.isolation.transfer import resolve_reference

    problems: list[str] = []
    factories: dict[int, str] = {}
    for job in models:
        here = f"jobs[{job.index}]"
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
            factories[job.index] = job.model
            continue
        try:
            factories[job.index] = model_factory(job.model, f"{here}.model")
        except ConfigurationError as exc:
            problems.append(str(exc))
    return factories, problems


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
        return "; ".join(_described(path, error))
    if isinstance(error, ConfigurationError):
        return f"{where}: {error}"
    if isinstance(error, (TypeError, ValueError)):
        return f"{where}: wrong type or value ({error})"
    return f"{where}: {type(error).__name__}: {error}"
