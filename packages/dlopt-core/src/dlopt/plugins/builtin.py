"""Core's built-in plans: ``eager_fp32`` (the reference) and the ``native`` variants.

They register through the same ``dlopt_register_providers`` hook as every plugin.

``native`` is PyTorch's own optimized path without a new runtime: channels-last memory
format where inputs are 4-D/5-D images, and autocast in the precision this device runs
fast. Each combination is its own candidate; the race decides, not a rule (bf16 without
channels-last was slower than fp32 at batch 1 on a CPU where bf16 + channels-last was
3.3x faster at batch 8).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from attrs import frozen

from dlopt.contract.hooks import hookimpl
from dlopt.contract.provider import (
    EAGER_SERVING,
    BuiltPlan,
    ProviderAvailability,
    ProviderContext,
    Role,
)
from dlopt.errors import PlanNotApplicable
from dlopt.platform.machine import cpu_info
from dlopt.platform.probing import cuda_bf16_native
from dlopt.platform.tree import iter_tensors, map_tensors
from dlopt.precision import Precision

DLOPT_PLUGIN_API_VERSION = "2.1"

_FORMAT_BY_RANK = {4: torch.channels_last, 5: torch.channels_last_3d}


@frozen
class EagerFp32Provider:
    """The model exactly as given, in fp32: the correctness and performance reference."""

    name: str = "eager_fp32"
    precision: Precision = Precision.FP32
    role: Role = Role.REFERENCE

    def probe(self, context: ProviderContext) -> ProviderAvailability:
        return ProviderAvailability.ok(sdk_versions={"torch": torch.__version__})

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        return BuiltPlan(
            runner=model,
            precision=self.precision,
            metadata={"plan": "eager"},
            serving=EAGER_SERVING,
        )


@frozen
class NativeProvider:
    """Channels-last and/or autocast, PyTorch's native optimized path."""

    name: str
    channels_last: bool
    autocast_dtype: torch.dtype | None
    role: Role = Role.NATIVE

    @property
    def precision(self) -> Precision:
        if self.autocast_dtype is torch.bfloat16:
            return Precision.BF16
        if self.autocast_dtype is torch.float16:
            return Precision.FP16
        return Precision.FP32

    def probe(self, context: ProviderContext) -> ProviderAvailability:
        versions = {"torch": torch.__version__}
        device_type = context.target.device_type
        if device_type not in {"cpu", "cuda"}:
            return ProviderAvailability.unavailable(
                f"native plans are defined for cpu and cuda, not {device_type}",
                sdk_versions=versions,
            )
        if self.autocast_dtype is None:
            return ProviderAvailability.ok(sdk_versions=versions)
        if device_type == "cuda":
            if not torch.cuda.is_available():
                return ProviderAvailability.unavailable(
                    "torch sees no CUDA device",
                    "install a CUDA build of torch on a machine with an NVIDIA GPU",
                    sdk_versions=versions,
                )
            index = context.target.torch_device().index
            if self.autocast_dtype is torch.bfloat16 and not cuda_bf16_native(index):
                return ProviderAvailability.unavailable(
                    "this GPU has no native bf16 (needs compute capability 8.0+)",
                    sdk_versions=versions,
                )
            return ProviderAvailability.ok(sdk_versions=versions)
        cpu = cpu_info()
        if self.autocast_dtype is torch.bfloat16 and not cpu.fast_bf16:
            return ProviderAvailability.unavailable(
                f"CPU ({cpu.model}) lacks AVX-512 BF16 and AMX: bf16 would be emulated and slower",
                sdk_versions=versions,
                details={"isa": ",".join(cpu.isa_flags) or "none of interest"},
            )
        if self.autocast_dtype is torch.float16:
            return ProviderAvailability.unavailable(
                "fp16 autocast on CPU is not offered (bf16 is the CPU reduced precision)",
                sdk_versions=versions,
            )
        return ProviderAvailability.ok(sdk_versions=versions)

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        device_type = context.target.device_type
        plan_model = model
        if self.channels_last:
            eligible = [
                t
                for case in context.cases
                for t in iter_tensors((case.args, case.kwargs))
                if t.dim() in _FORMAT_BY_RANK and t.is_floating_point()
            ]
            if context.cases and not eligible:
                raise PlanNotApplicable(
                    "channels-last needs 4-D or 5-D floating inputs (images, volumes); "
                    "this workload has none, so the plan would equal eager"
                )
            # to(memory_format=...) rewrites the module in place: work on a copy.
            plan_model = copy.deepcopy(model)
            rank = max((t.dim() for t in eligible), default=4)
            plan_model = plan_model.to(memory_format=_FORMAT_BY_RANK[rank])  # type: ignore[call-overload]

        autocast_dtype = self.autocast_dtype
        channels_last = self.channels_last

        def runner(*args: Any, **kwargs: Any) -> Any:
            if channels_last:
                args, kwargs = map_tensors(_to_channels_last, (args, kwargs))
            if autocast_dtype is None:
                return plan_model(*args, **kwargs)
            with torch.autocast(device_type=device_type, dtype=autocast_dtype):
                return plan_model(*args, **kwargs)

        return BuiltPlan(
            runner=runner,
            precision=self.precision,
            # Eager torch (autocast and channels-last included): any thread, mode, shape.
            serving=EAGER_SERVING,
            # Autocast returns bf16/fp16 leaves where the last op ran in low precision.
            output_dtype=autocast_dtype,
            metadata={
                "channels_last": channels_last,
                "autocast_dtype": str(autocast_dtype).replace("torch.", "")
                if autocast_dtype
                else None,
            },
        )


def _to_channels_last(tensor: torch.Tensor) -> torch.Tensor:
    memory_format = _FORMAT_BY_RANK.get(tensor.dim())
    if memory_format is None or not tensor.is_floating_point():
        return tensor
    return tensor.contiguous(memory_format=memory_format)


def native_variants() -> list[NativeProvider]:
    """Every native combination; probes drop those the device cannot run fast."""
    return [
        NativeProvider("native_channels_last", channels_last=True, autocast_dtype=None),
        NativeProvider("native_bf16", channels_last=False, autocast_dtype=torch.bfloat16),
        NativeProvider(
            "native_bf16_channels_last", channels_last=True, autocast_dtype=torch.bfloat16
        ),
        NativeProvider("native_fp16", channels_last=False, autocast_dtype=torch.float16),
        NativeProvider(
            "native_fp16_channels_last", channels_last=True, autocast_dtype=torch.float16
        ),
    ]


@hookimpl
def dlopt_register_providers(register: Any) -> None:
    register(EagerFp32Provider())
    for provider in native_variants():
        register(provider)
