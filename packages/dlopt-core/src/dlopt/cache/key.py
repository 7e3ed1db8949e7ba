"""The cache key: canonical JSON over everything that can change a decision, hashed.

The ingredients are a JSON object with one section per kind of input (model, workload,
policy, plans, target, software, machine). :func:`canonical_json` spells every value one
way only (sorted keys, no spaces, an integral float written as the integer, other floats
by ``repr``, NaN and infinities as strings), so the same ingredients always hash to the
same key, whatever order settings were given in. The weights enter as SHA-256 over the
per-tensor SHA-256 digests of every parameter and buffer, those the selection's model
guard computed (:func:`model_ingredients`): two models of the same structure and
different weights never share a key, and the weights are read once per selection.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dlopt._version import __version__

if TYPE_CHECKING:
    import torch

    from dlopt.contract.provider import ProviderInfo
    from dlopt.settings.policy import OptimizationPolicy
    from dlopt.settings.target import ExecutionTarget
    from dlopt.settings.workload import WorkloadProfile
    from dlopt.validation.fingerprint import ModelFingerprint

#: Bumped when the ingredients change shape: records keyed the old way are never hit.
#: 2: the workload's grad mode (plans judged before it were called on ordinary tensors).
#: 3: the weights hashed from the model guard's per-tensor digests.
KEY_VERSION = 3
#: Policy fields left out of the policy section: where and whether to cache never change
#: the decision, and which plans race with which options enter as the plans section
#: (each plan's resolved options), so ``include`` in another order or an option spelled
#: at its default value is the same key. What a decision does with an unseen signature
#: is how it serves, not what it decided; so is the production guard.
POLICY_FIELDS_NOT_IN_KEY = (
    "plan_cache_dir",
    "reuse_cached_plan",
    "include",
    "exclude",
    "plan_options",
    "on_unseen_signature",
    "on_nonfinite_input",
    "on_plan_failure",
    "max_failures",
    "shadow_rate",
    "max_mismatches",
)


def canonical(value: Any) -> Any:
    """``value`` as plain JSON data with one spelling per value (see the module docstring)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        # 1 and 1.0 mean the same setting: one spelling. repr(float) is the shortest
        # string that reads back to the same float, so it never varies between runs.
        return int(value) if value.is_integer() and abs(value) < 2**53 else float(repr(value))
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    raise TypeError(f"{type(value).__name__} has no canonical JSON form")


def canonical_json(value: Any) -> str:
    """The one JSON text of ``value``: sorted keys, no whitespace, canonical numbers."""
    return json.dumps(
        canonical(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def key_of(ingredients: Mapping[str, Any]) -> str:
    """The cache key: the SHA-256 (hex) of the ingredients' canonical JSON."""
    return hashlib.sha256(canonical_json(ingredients).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- tensors


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of ``tensor`` (a contiguous CPU copy only when needed), zero-copy."""
    import torch

    data = tensor.detach()
    if data.is_quantized:
        data = data.int_repr()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.contiguous().reshape(-1)
    if data.numel() == 0:
        return memoryview(b"")
    # Viewed as bytes, every dtype (bf16 and float8 included) hashes what is stored.
    as_bytes = data.view(torch.uint8) if data.element_size() > 0 else data
    return as_bytes.numpy().data.cast("B")


def hash_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 over each tensor's name, dtype, shape and raw bytes, in the order given."""
    digest = hashlib.sha256()
    for name, tensor in named:
        header = f"{name}|{str(tensor.dtype).removeprefix('torch.')}|{list(tensor.shape)}\n"
        digest.update(header.encode("utf-8"))
        try:
            digest.update(tensor_bytes(tensor))
        except (RuntimeError, TypeError) as exc:
            # A tensor subclass without plain storage: its printed form is all we can read.
            digest.update(f"unhashable:{type(tensor).__name__}:{exc}".encode())
    return digest.hexdigest()


def inputs_sha256(cases: Iterable[tuple[str, Sequence[Any], Mapping[str, Any]]]) -> str:
    """SHA-256 over the values of the inputs ``(name, args, kwargs)`` of every case, in
    order (the key holds only their signatures): a tensor by its raw bytes, any other leaf
    by its signature (:func:`value_signature`, the value itself for a plain one)."""
    import torch

    from dlopt.platform.tree import leaves_with_paths

    digest = hashlib.sha256()
    for name, args, kwargs in cases:
        digest.update(f"case|{name}\n".encode())
        for path, leaf in leaves_with_paths({"args": list(args), "kwargs": dict(kwargs)}):
            if isinstance(leaf, torch.Tensor):
                digest.update(hash_tensors([(path, leaf)]).encode())
            else:
                digest.update(f"{path}|{canonical_json(value_signature(leaf))}\n".encode())
    return digest.hexdigest()


def model_ingredients(
    model: torch.nn.Module, fingerprint: ModelFingerprint | None = None
) -> dict[str, Any]:
    """The model's class, structure (its printed module tree) and weight hashes: SHA-256
    over every parameter's (and buffer's) name, dtype, shape and digest in
    ``fingerprint`` (the selection's model guard read every weight once already; computed
    here when not given)."""
    from dlopt.validation.fingerprint import ModelFingerprint

    structure = repr(model)
    prints = fingerprint if fingerprint is not None else ModelFingerprint.of(model)

    def of_kind(kind: str) -> str:
        digest = hashlib.sha256()
        for t in prints.tensors:
            if t.kind == kind:
                digest.update(f"{t.name}|{t.dtype}|{list(t.shape)}|{t.digest}\n".encode())
        return digest.hexdigest()

    return {
        "class": f"{type(model).__module__}.{type(model).__qualname__}",
        "structure_sha256": hashlib.sha256(structure.encode("utf-8")).hexdigest(),
        "parameters_sha256": of_kind("parameter"),
        "buffers_sha256": of_kind("buffer"),
        "training": model.training,
    }


def value_signature(value: Any) -> Any:
    """What a decision can depend on in one input: a tensor's dtype, shape, layout and
    device (not its values); a plain value itself; containers element by element."""
    import torch

    if isinstance(value, torch.Tensor):
        layout = "strided"
        if value.layout is not torch.strided:
            layout = str(value.layout).removeprefix("torch.")
        elif value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last):
            layout = "channels_last" if not value.is_contiguous() else "contiguous"
        elif value.dim() == 5 and value.is_contiguous(memory_format=torch.channels_last_3d):
            layout = "channels_last_3d" if not value.is_contiguous() else "contiguous"
        elif value.is_contiguous():
            layout = "contiguous"
        return {
            "tensor": str(value.dtype).removeprefix("torch."),
            "shape": list(value.shape),
            "layout": layout,
            "device": str(value.device),
            "requires_grad": value.requires_grad,
        }
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"type": type(value).__name__, "value": value}
    if isinstance(value, Mapping):
        return {"type": "dict", "items": {str(k): value_signature(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"type": type(value).__name__, "items": [value_signature(v) for v in value]}
    return {"type": f"{type(value).__module__}.{type(value).__qualname__}", "value": repr(value)}


def workload_ingredients(workload: WorkloadProfile) -> dict[str, Any]:
    """Every case's name, traffic weight and input signature, the call horizon and the
    calling context."""
    return {
        "expected_calls": workload.expected_calls,
        "grad_mode": workload.grad_mode.value,
        "cases": [
            {
                "name": case.name,
                "weight": float(case.weight),
                "args": [value_signature(a) for a in case.args],
                "kwargs": {k: value_signature(v) for k, v in case.kwargs.items()},
            }
            for case in workload.cases
        ],
    }


def policy_ingredients(policy: OptimizationPolicy) -> dict[str, Any]:
    """Every policy field that can change the decision (the cache's own switches are not)."""
    import attrs

    from dlopt.platform.serialization import to_jsonable

    # Field by field: the policy's annotations name types only imported for checking.
    return {
        f.name: to_jsonable(getattr(policy, f.name))
        for f in attrs.fields(type(policy))
        if f.name not in POLICY_FIELDS_NOT_IN_KEY
    }


def plan_ingredients(infos: Sequence[ProviderInfo], options: Sequence[Any]) -> list[Any]:
    """Each racing plan's name, plugin, distribution, version, options and class."""
    from dlopt.platform.serialization import to_jsonable

    return [
        {
            "name": info.name,
            "plugin": info.plugin,
            "distribution": info.distribution,
            "version": info.version,
            "options": to_jsonable(opts) if opts is not None else None,
            "provider_class": _class_name(info.provider),
        }
        for info, opts in zip(infos, options, strict=True)
    ]


def _class_name(provider: object) -> str:
    """The provider's class, seen through a wrapper that names what it wraps
    (``__wrapped__``: the isolated worker's watchdog wrapper)."""
    inner = getattr(provider, "__wrapped__", provider)
    return f"{type(inner).__module__}.{type(inner).__qualname__}"


def software_ingredients() -> dict[str, Any]:
    """dlopt, Python and torch (with its CUDA and cuDNN) versions."""
    import torch

    cudnn = None
    if torch.backends.cudnn.is_available():
        cudnn = torch.backends.cudnn.version()
    return {
        "dlopt": __version__,
        "python": platform.python_version(),
        "python_implementation": sys.implementation.name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
    }


def machine_ingredients(target: ExecutionTarget) -> dict[str, Any]:
    """CPU model, ISA flags and torch's thread count; the GPU's name, compute capability
    and driver when the target is CUDA."""
    import torch

    from dlopt.platform.machine import cpu_info

    cpu = cpu_info()
    facts: dict[str, Any] = {
        "os": platform.system(),
        "arch": platform.machine(),
        "cpu_model": cpu.model,
        "isa_flags": list(cpu.isa_flags),
        "torch_cpu_capability": cpu.torch_cpu_capability,
        "threads": cpu.torch_threads,
    }
    if target.is_cuda and torch.cuda.is_available():
        device = torch.device(target.device)
        major, minor = torch.cuda.get_device_capability(device)
        facts["gpu"] = {
            "name": torch.cuda.get_device_name(device),
            "compute_capability": f"{major}.{minor}",
            "driver": _cuda_driver_version(),
        }
    return facts


def _cuda_driver_version() -> int | None:
    try:
        import torch

        return int(torch._C._cuda_getDriverVersion())  # type: ignore[attr-defined]
    except Exception:  # not every build exposes it
        return None


def cache_ingredients(
    model: torch.nn.Module,
    workload: WorkloadProfile,
    policy: OptimizationPolicy,
    target: ExecutionTarget,
    plans: Sequence[ProviderInfo],
    plan_options: Sequence[Any],
    fingerprint: ModelFingerprint | None = None,
) -> dict[str, Any]:
    """Everything that can change the decision, as JSON data (see the module docstring);
    ``fingerprint``: the model's, where the selection took one (its guard's).

    Call it where the race runs (inside the target's thread setting): the thread count
    is read from torch.
    """
    from dlopt.platform.serialization import to_jsonable

    return {
        "key_version": KEY_VERSION,
        "model": model_ingredients(model, fingerprint),
        "workload": workload_ingredients(workload),
        "policy": policy_ingredients(policy),
        "plans": plan_ingredients(plans, plan_options),
        "target": to_jsonable(target),
        "software": software_ingredients(),
        "machine": machine_ingredients(target),
    }


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """The paths (``policy.constraints.min_speedup``) where two ingredient trees differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for name in sorted(set(old) | set(new)):
            where = f"{path}.{name}" if path else name
            if name not in old or name not in new:
                found.append(where)
            else:
                found.extend(differences(old[name], new[name], where))
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            found.extend(differences(a, b, f"{path}[{index}]"))
        return found
    return [] if canonical(old) == canonical(new) else [path or "(everything)"]
