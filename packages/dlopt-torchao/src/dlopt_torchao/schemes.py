"""The quantization schemes offered, and how each maps onto the installed torchao's API.

torchao's API moves between releases (config classes gain fields, int4 CPU packing moved
from ``Int4CPULayout`` to an ``opaque`` packing format to a prototype config). Each scheme
resolves, for one device, to a :class:`Recipe` built from what the installed torchao
actually has, or to a reason it cannot run there. Resolution imports torchao; call it
from ``probe``/``build`` only.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import torch
from attrs import frozen

from dlopt.plugin import ExecutionTarget, Precision, Quantization, TextEnum

#: torch's CPU int4 packing (_convert_weight_to_int4pack_for_cpu) needs N % 16 == 0.
_CPU_INT4_N_TILE = 16

#: Group sizes torchao's int4 kernels accept, preferred first (larger = fewer scales).
INT4_GROUP_SIZES = (128, 64, 32)

CUDA_TORCH_HINT = (
    "install a CUDA build of torch on a machine with an NVIDIA GPU, e.g. "
    "pip install torch --index-url https://download.pytorch.org/whl/cu126"
)


class Scheme(TextEnum):
    """A torchao quantization scheme; the value is the plan-name suffix."""

    INT8_DYNAMIC = "int8_dynamic"
    INT8_WEIGHT_ONLY = "int8_weight_only"
    INT4_WEIGHT_ONLY = "int4_weight_only"
    FP8 = "fp8"

    @property
    def precision(self) -> Precision:
        return _PRECISION[self]

    @property
    def quantization(self) -> Quantization:
        """How the scheme scales activations (fp8: per call, like int8 dynamic)."""
        return _QUANTIZATION[self]


_PRECISION = {
    Scheme.INT8_DYNAMIC: Precision.INT8,
    Scheme.INT8_WEIGHT_ONLY: Precision.INT8,
    Scheme.INT4_WEIGHT_ONLY: Precision.INT4,
    Scheme.FP8: Precision.FP8,
}
_QUANTIZATION = {
    Scheme.INT8_DYNAMIC: Quantization.DYNAMIC,
    Scheme.INT8_WEIGHT_ONLY: Quantization.WEIGHT_ONLY,
    Scheme.INT4_WEIGHT_ONLY: Quantization.WEIGHT_ONLY,
    Scheme.FP8: Quantization.DYNAMIC,
}


@frozen
class Recipe:
    """How to quantize for one scheme on one device with the installed torchao.

    ``make_config(group_size)`` returns a fresh torchao config (``group_size`` is ``None``
    unless ``grouped``). ``model_dtype``: the dtype the model copy must be cast to first
    (CUDA tinygemm int4 runs in bf16); inputs are cast to it too.
    """

    make_config: Callable[[int | None], Any]
    layout: str
    grouped: bool = False
    model_dtype: torch.dtype | None = None
    #: The kernel packs weights in tiles of this many output rows; other layers stay fp.
    out_features_multiple: int = 1

    def layer_problem(self, layer: torch.nn.Linear, group_size: int | None) -> str | None:
        """Why this recipe cannot quantize ``layer`` (it then stays in full precision)."""
        if layer.out_features % self.out_features_multiple:
            return f"out_features {layer.out_features} is not a multiple of {self.out_features_multiple}"
        if group_size is not None and layer.in_features % group_size:
            return f"in_features {layer.in_features} is not a multiple of group size {group_size}"
        return None


@frozen
class Unavailable:
    """Why a scheme cannot run on a device, and what would fix it."""

    reason: str
    install_hint: str | None = None


def make_config(cls: type, **kwargs: Any) -> Any:
    """Instantiate a torchao config with the fields this release has.

    ``set_inductor_config`` is switched off where it exists: left on, torchao rewrites the
    process-wide ``torch._inductor.config``, which would change every other Inductor plan
    in the same race.
    """
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else None
    if names is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in names}
        if "set_inductor_config" in names:
            kwargs["set_inductor_config"] = False
    return cls(**kwargs)


def cuda_capability(target: ExecutionTarget) -> tuple[tuple[int, int] | None, Unavailable | None]:
    """Compute capability of the target's CUDA device, or why there is none."""
    if not torch.cuda.is_available():
        return None, Unavailable(
            f"torch {torch.__version__} sees no CUDA device "
            f"(built with CUDA {torch.version.cuda or 'none'})",
            CUDA_TORCH_HINT,
        )
    index = target.torch_device().index
    if index is None:  # target "cuda": torch's current device, where the plan will run
        index = torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        return None, Unavailable(f"target {target.device} does not exist: {count} CUDA device(s)")
    major, minor = torch.cuda.get_device_capability(index)
    return (int(major), int(minor)), None


def _config_class(quantization: Any, name: str, torchao_version: str) -> type | Unavailable:
    cls = getattr(quantization, name, None)
    if cls is None:
        return Unavailable(
            f"torchao {torchao_version} has no torchao.quantization.{name}",
            'pip install -U "torchao>=0.10"',
        )
    return cls


def _plain_recipe(quantization: Any, name: str, torchao_version: str) -> Recipe | Unavailable:
    """A scheme whose config takes no model-dependent argument."""
    found = _config_class(quantization, name, torchao_version)
    if isinstance(found, Unavailable):
        return found
    cls: type = found
    return Recipe(lambda g: make_config(cls), name)


def _int4_packing_format(name: str) -> Any | None:
    """The member ``name`` of torchao's Int4PackingFormat enum, if this release has it."""
    try:
        workflows = importlib.import_module("torchao.quantization.quantize_.workflows")
    except ImportError:
        return None
    fmt = getattr(workflows, "Int4PackingFormat", None)
    return getattr(fmt, name, None) if fmt is not None else None


def _int4_cpu_recipe(quantization: Any, torchao_version: str) -> Recipe | Unavailable:
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return Unavailable(
            f"torch {torch.__version__} has no CPU int4 matmul (_weight_int4pack_mm_for_cpu)",
            "pip install -U torch",
        )
    # Newest first: each torchao release exposes CPU int4 (tinygemm for CPU) one way.
    opaque = _int4_packing_format("OPAQUE")
    if opaque is not None and hasattr(quantization, "Int4WeightOnlyConfig"):
        cls = quantization.Int4WeightOnlyConfig
        return Recipe(
            lambda g: make_config(cls, group_size=g, int4_packing_format=opaque),
            "Int4WeightOnlyConfig(int4_packing_format=opaque)",
            grouped=True,
            out_features_multiple=_CPU_INT4_N_TILE,
        )
    try:
        proto = importlib.import_module("torchao.prototype.quantization.int4")
        proto_cls = proto.PrototypeInt4WeightOnlyConfig
    except (ImportError, AttributeError):
        proto_cls = None
    if proto_cls is not None:
        return Recipe(
            lambda g: make_config(proto_cls, group_size=g),
            "PrototypeInt4WeightOnlyConfig (Int4OpaqueTensor, CPU tinygemm)",
            grouped=True,
            out_features_multiple=_CPU_INT4_N_TILE,
        )
    try:
        layout_cls = importlib.import_module("torchao.dtypes").Int4CPULayout
    except (ImportError, AttributeError):
        layout_cls = None
    if layout_cls is not None and hasattr(quantization, "Int4WeightOnlyConfig"):
        cls = quantization.Int4WeightOnlyConfig
        return Recipe(
            lambda g: make_config(cls, group_size=g, layout=layout_cls(), version=1),
            "Int4WeightOnlyConfig(layout=Int4CPULayout())",
            grouped=True,
            out_features_multiple=_CPU_INT4_N_TILE,
        )
    return Unavailable(
        f"torchao {torchao_version} offers no CPU int4 layout (looked for the 'opaque' "
        "packing format, PrototypeInt4WeightOnlyConfig and Int4CPULayout)",
        'pip install -U "torchao>=0.10"',
    )


def _int4_cuda_recipe(
    quantization: Any, torchao_version: str, capability: tuple[int, int]
) -> Recipe | Unavailable:
    if capability < (8, 0):
        return Unavailable(
            f"int4 weight-only uses the tinygemm kernel, which needs CUDA compute capability "
            f"8.0+ (Ampere or newer); this GPU is {capability[0]}.{capability[1]}"
        )
    found = _config_class(quantization, "Int4WeightOnlyConfig", torchao_version)
    if isinstance(found, Unavailable):
        return found
    cls: type = found
    field_names = (
        {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    )
    tiled = _int4_packing_format("TILE_PACKED_TO_4D")
    if "int4_packing_format" in field_names:
        if tiled is None:
            return Unavailable(
                f"torchao {torchao_version} has Int4WeightOnlyConfig but no tinygemm "
                "'tile_packed_to_4d' packing format",
                'pip install -U "torchao>=0.10"',
            )
        return Recipe(
            lambda g: make_config(cls, group_size=g, int4_packing_format=tiled),
            "Int4WeightOnlyConfig(int4_packing_format=tile_packed_to_4d)",
            grouped=True,
            model_dtype=torch.bfloat16,
        )
    # Older releases: the default layout is the tinygemm tensor-core tiled layout.
    return Recipe(
        lambda g: make_config(cls, group_size=g),
        "Int4WeightOnlyConfig (tensor-core tiled layout)",
        grouped=True,
        model_dtype=torch.bfloat16,
    )


def resolve_recipe(
    scheme: Scheme, target: ExecutionTarget, quantization: Any, torchao_version: str
) -> Recipe | Unavailable:
    """What ``scheme`` needs on ``target`` with the imported ``torchao.quantization``."""
    device_type = target.device_type
    if device_type not in {"cpu", "cuda"}:
        return Unavailable(f"torchao schemes are offered for cpu and cuda, not {device_type}")
    capability: tuple[int, int] | None = None
    if device_type == "cuda":
        capability, problem = cuda_capability(target)
        if problem is not None:
            return problem
        assert capability is not None

    if scheme is Scheme.INT8_DYNAMIC:
        return _plain_recipe(quantization, "Int8DynamicActivationInt8WeightConfig", torchao_version)
    if scheme is Scheme.INT8_WEIGHT_ONLY:
        return _plain_recipe(quantization, "Int8WeightOnlyConfig", torchao_version)
    if scheme is Scheme.INT4_WEIGHT_ONLY:
        if capability is None:
            return _int4_cpu_recipe(quantization, torchao_version)
        return _int4_cuda_recipe(quantization, torchao_version, capability)
    if scheme is Scheme.FP8:
        if capability is None:
            return Unavailable(
                "fp8 dynamic quantization needs a CUDA GPU with compute capability 8.9+ "
                "(Ada, Hopper or newer); torchao has no fp8 matmul for CPU",
                CUDA_TORCH_HINT,
            )
        if capability < (8, 9):
            return Unavailable(
                "fp8 dynamic quantization needs CUDA compute capability 8.9+ (Ada, Hopper or "
                f"newer); this GPU is {capability[0]}.{capability[1]}"
            )
        return _plain_recipe(
            quantization, "Float8DynamicActivationFloat8WeightConfig", torchao_version
        )
    raise AssertionError(f"unhandled scheme {scheme}")  # pragma: no cover


def choose_group_size(recipe: Recipe, layers: list[torch.nn.Linear]) -> tuple[int | None, int]:
    """The int4 group size that lets ``recipe`` quantize the most layers (ties: the larger).

    A layer whose ``in_features`` the group size does not divide stays in full precision.
    Returns ``(group_size, layers covered)``; ``(None, 0)`` when none fits.
    """
    best: tuple[int | None, int] = (None, 0)
    for size in INT4_GROUP_SIZES:
        covered = sum(1 for layer in layers if recipe.layer_problem(layer, size) is None)
        if covered > best[1]:
            best = (size, covered)
    return best
