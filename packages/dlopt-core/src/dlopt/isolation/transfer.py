"""What crosses the process boundary: the worker's spec as strict JSON, and the
workload's tensors in an ``.npz`` archive the host wrote (read with
``allow_pickle=False``). Nothing is unpickled; the model is rebuilt in the worker from a
``module:factory`` reference, explicit providers from their importable class names.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch
from attrs import field, frozen

from dlopt.errors import ConfigurationError
from dlopt.platform.serialization import dumps, from_jsonable, parse_strict_json, to_jsonable
from dlopt.settings.policy import OptimizationPolicy
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.vocabulary import GradMode

#: How a plugin (not a plan) is named in the journal, the heartbeat and exclusions.
PLUGIN_PREFIX = "plugin:"
#: The environment variable the host sets, for its worker, to its own process id: a
#: worker whose parent is no longer that process leaves (``worker.leave_with_the_host``).
HOST_PID_ENV = "DLOPT_ISOLATION_HOST_PID"
#: The environment variable that marks one worker's processes: the host sets it, for
#: that worker, to a value of its own, and everything the worker starts inherits it, so
#: what it left running is found by it even after the worker died.
WORKER_MARK_ENV = "DLOPT_ISOLATION_WORKER"
#: Dtypes numpy has no type for travel as raw bits of the same width.
_BITS_OF = {torch.bfloat16: torch.int16}


@frozen
class TensorRef:
    """One tensor of the archive: its entry and its torch dtype."""

    key: str
    dtype: str


@frozen
class CaseSpec:
    name: str
    weight: float
    args: tuple[TensorRef, ...] = ()
    kwargs: dict[str, TensorRef] = field(factory=dict)


@frozen
class WorkloadSpec:
    name: str
    cases: tuple[CaseSpec, ...]
    expected_calls: int | None = None
    inputs: str | None = None
    #: A batched profile's batch size per case, its batch dimension and whether the
    #: selection drops the sizes the reference runs out of memory on.
    batch_sizes: tuple[int, ...] | None = None
    batch_dim: int = 0
    fit_to_memory: bool = False
    grad_mode: GradMode = GradMode.INFERENCE_MODE


#: The profile's fields a spec carries as they are (all but the cases, written apart).
_PROFILE_FIELDS = tuple(a.name for a in attrs.fields(WorkloadSpec) if a.name != "cases")


@frozen
class WorkerSpec:
    """Everything a worker needs, as strict JSON."""

    target: ExecutionTarget
    #: The policy as :func:`policy_to_json` writes it.
    policy: dict[str, Any]
    journal: str
    heartbeat: str
    result: str
    #: ``select`` (a whole selection) or ``probe`` (load the plugins, probe every plan).
    task: str = "select"
    #: ``select`` only: the model factory, the workload's layout and tensors, artifacts.
    model: str = ""
    workload: WorkloadSpec | None = None
    tensors: str = ""
    artifact_dir: str = ""
    #: Explicit providers as ``module:Class`` (built with no arguments in the worker).
    providers: tuple[str, ...] = ()
    #: Plans (and ``plugin:NAME`` plugins) a previous worker crashed or hung in: never
    #: loaded, probed or built again.
    excluded: tuple[str, ...] = ()
    #: The host's import path (:func:`host_import_path`), in its order: the worker finds
    #: what the host found, and a module in the working directory shadows nothing there
    #: that it did not shadow in the host.
    sys_path: tuple[str, ...] = ()
    #: Which worker of this selection this is (1 = the first).
    attempt: int = 1
    #: When the host's ``select`` was called (``time.time()``; 0: unknown): the time
    #: budget counts from there, the worker's start-up included.
    started_at: float = 0.0
    #: The user named no plan cache: ``policy`` names one of the selection's own, in its
    #: working directory, where the worker leaves its winner (artifacts and compile
    #: caches, no program) for the host to bring back instead of building it again.
    handback: bool = False
    #: ``select`` only: the SHA-256 of the host's model's weights (:func:`weights_sha256`;
    #: empty: not checked): the worker's rebuilt model must carry the same.
    weights: str = ""


def host_import_path() -> tuple[str, ...]:
    """This process's ``sys.path`` as a worker takes it: in its order, with ``""`` (the
    working directory, where the host has it at all) written as that directory."""
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed: nothing can be found there
        return tuple(entry for entry in sys.path if entry)
    return tuple(entry or cwd for entry in sys.path)


def policy_to_json(policy: OptimizationPolicy) -> dict[str, Any]:
    """``policy`` as plain JSON, one entry per field."""
    return {f.name: to_jsonable(getattr(policy, f.name)) for f in attrs.fields(OptimizationPolicy)}


def policy_from_json(data: dict[str, Any], *, user_metrics: bool = True) -> OptimizationPolicy:
    """The policy :func:`policy_to_json` wrote (its nested policies typed again).

    ``user_metrics=False`` leaves the quality policy's user metrics out: one that a plugin
    registers is known by name only once the plugins are loaded.
    """
    from dlopt.measurement import MeasurementPolicy
    from dlopt.settings.policy import DeploymentConstraints
    from dlopt.validation import QualityPolicy

    if not user_metrics and isinstance(data.get("quality"), dict):
        data = {**data, "quality": {**data["quality"], "user_metrics": []}}
    nested = {
        "constraints": DeploymentConstraints,
        "measurement": MeasurementPolicy,
        "quality": QualityPolicy,
    }
    values = {
        name: from_jsonable(value, nested[name]) if name in nested else value
        for name, value in data.items()
    }
    return OptimizationPolicy(**values)


def write_spec(spec: WorkerSpec, path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    target.write_text(dumps(spec), encoding="utf-8")
    return target


def read_spec(path: str | os.PathLike[str]) -> WorkerSpec:
    return from_jsonable(parse_strict_json(Path(path).read_text(encoding="utf-8")), WorkerSpec)


def write_workload(workload: WorkloadProfile, path: str | os.PathLike[str]) -> WorkloadSpec:
    """Write every input tensor of ``workload`` to the ``.npz`` at ``path``; return the
    layout the worker rebuilds the workload from. Inputs that are not tensors cannot
    cross: a clear error says so."""
    arrays: dict[str, np.ndarray] = {}

    def put(value: Any, key: str, where: str) -> TensorRef:
        if not isinstance(value, torch.Tensor):
            raise ConfigurationError(
                f"{where} is a {type(value).__name__}: an isolated selection passes only "
                "tensors to its worker; pass tensors, or select in process "
                "(OptimizationPolicy(isolation='in_process'))"
            )
        tensor = value.detach().cpu().contiguous()
        bits = _BITS_OF.get(tensor.dtype)
        arrays[key] = (tensor.view(bits) if bits is not None else tensor).numpy()
        return TensorRef(key, str(tensor.dtype).removeprefix("torch."))

    cases = []
    for i, case in enumerate(workload.cases):
        args = tuple(
            put(a, f"c{i}_a{j}", f"case {case.name!r} argument {j}")
            for j, a in enumerate(case.args)
        )
        kwargs = {
            k: put(v, f"c{i}_k{j}", f"case {case.name!r} keyword {k!r}")
            for j, (k, v) in enumerate(case.kwargs.items())
        }
        cases.append(CaseSpec(case.name, case.weight, args, kwargs))
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)  # type: ignore[arg-type]  # numpy's stub: names are arrays
    return WorkloadSpec(
        cases=tuple(cases), **{name: getattr(workload, name) for name in _PROFILE_FIELDS}
    )


def read_workload(spec: WorkloadSpec, path: str | os.PathLike[str], device: str) -> WorkloadProfile:
    """The workload the host wrote, on ``device`` (no pickle: object arrays are refused)."""
    with np.load(path, allow_pickle=False) as archive:

        def get(ref: TensorRef) -> torch.Tensor:
            dtype = getattr(torch, ref.dtype)
            tensor = torch.from_numpy(archive[ref.key].copy())
            if dtype in _BITS_OF:
                tensor = tensor.view(dtype)
            return tensor.to(device)

        cases = [
            WorkloadCase(
                c.name,
                args=tuple(get(a) for a in c.args),
                kwargs={k: get(v) for k, v in c.kwargs.items()},
                weight=c.weight,
            )
            for c in spec.cases
        ]
    return WorkloadProfile(cases=cases, **{name: getattr(spec, name) for name in _PROFILE_FIELDS})


def reference_of(obj: Any, what: str) -> str:
    """``module:qualname`` of a module-level function or class a fresh process can import.

    A lambda, a nested function, something defined in ``__main__`` or not findable again
    by that name is refused with the alternatives."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    problem = None
    if not module or not qualname:
        problem = "has no importable name"
    elif module == "__main__":
        problem = "is defined in __main__, which a worker process does not run"
    elif "<" in qualname:
        problem = f"is {qualname}, not a module-level name"
    else:
        try:
            found = resolve_reference(f"{module}:{qualname}")
        except ConfigurationError:
            found = None
        if found is not obj:
            problem = f"is not found again as {module}:{qualname}"
    if problem is not None:
        raise ConfigurationError(
            f"{what} {problem}; an isolated selection rebuilds it in a fresh process: define "
            "it at module level in an importable module, or select in process "
            "(OptimizationPolicy(isolation='in_process'))"
        )
    return f"{module}:{qualname}"


def resolve_reference(ref: str) -> Any:
    """Import ``module:attr.path`` and return the object it names."""
    module_name, sep, attr_path = ref.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigurationError(f"bad reference {ref!r}: write MODULE:NAME")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr_path.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot import {ref}: {exc}") from None
    return obj


def build_model(ref: str, device: str) -> tuple[torch.nn.Module, WorkloadProfile | None]:
    """Import ``module:factory`` and call it: ``(model on device, workload or None)``."""
    model, workload = call_factory(resolve_reference(ref), ref)
    return model.to(device), workload


#: The seed torch's random generators hold while a model factory runs (then they are put
#: back): a factory that draws its weights at random builds the same model in the host
#: and in each worker.
FACTORY_SEED = 0


def weights_sha256(model: torch.nn.Module) -> str:
    """The SHA-256 of ``model``'s parameters and buffers (names, dtypes, shapes, bytes)."""
    from dlopt.cache.key import hash_tensors

    named = [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]
    return hash_tensors(named)


def call_factory(factory: Any, spec: str) -> tuple[torch.nn.Module, WorkloadProfile | None]:
    """What the model factory ``spec`` gives: ``factory`` is called (with torch's random
    generators seeded with :data:`FACTORY_SEED`, and put back after) unless it is a module
    already; it returns a model or a ``(model, WorkloadProfile)`` pair. ``(model in eval
    mode, workload or None)``; the user's code failing is a :class:`ConfigurationError`."""
    made = factory
    if callable(factory) and not isinstance(factory, torch.nn.Module):
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(FACTORY_SEED)
                made = factory()
        except (Exception, SystemExit) as exc:  # the user's code failing, not dlopt's
            message = str(exc)
            raised = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
            raise ConfigurationError(
                f"the model factory {spec} raised {raised}; call it in Python to see the traceback"
            ) from exc
    workload = None
    if isinstance(made, tuple) and len(made) == 2:
        made, workload = made
        if not isinstance(workload, WorkloadProfile):
            raise ConfigurationError(
                f"{spec} returned a pair whose second item is {type(workload).__name__}; "
                "return (model, dlopt.WorkloadProfile(...)) or the model alone"
            )
    if not isinstance(made, torch.nn.Module):
        raise ConfigurationError(
            f"{spec} returned {type(made).__name__}, expected a torch.nn.Module or a "
            "(model, WorkloadProfile) pair"
        )
    return made.eval(), workload
