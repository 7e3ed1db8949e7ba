"""The example's two plans for the tinynpu SDK.

``examplenpu_fp32`` compiles the model as it is; ``examplenpu_fast`` freezes it (weights
become constants, BatchNorm folds into the convolutions). Both take host tensors, so they
race on a host-side target (``cpu``), and both run asynchronously: calling the plan
enqueues work on the device and its ``synchronize`` waits for it.

Everything comes from ``dlopt.plugin``; the SDK is imported inside ``availability``, ``build``
and ``load`` only, so listing plugins never pays for it.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from dlopt.plugin import (
    BuiltPlan,
    Concurrency,
    ExecutionTarget,
    Precision,
    PreparedCase,
    Provider,
    ProviderAvailability,
    ProviderBuildError,
    ProviderContext,
    Role,
    ServingTraits,
    check_distribution,
    is_plain_name,
    refuse_value_dependence,
    try_import,
    version_satisfies,
)

if TYPE_CHECKING:
    import tinynpu
    import torch

#: The distribution that ships the SDK. A real SDK is its own distribution (say,
#: ``tinynpu-sdk``); this example ships it inside itself.
SDK_DISTRIBUTION = "dlopt-example-npu"
SDK_MODULE = "tinynpu"
#: The SDK versions this provider was written for.
SDK_VERSIONS = ">=1.0,<2"
INSTALL_HINT = "pip install -e examples/dlopt-example-npu (from a dlopt checkout)"
#: The file a built plan writes into its plan directory: the SDK's program file.
PROGRAM_FILE = "program.tnpu"


def _at_least_one(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


@attrs.frozen
class NpuOptions:
    """Options of both plans (``OptimizationPolicy(plan_options={"examplenpu_fp32": {...}})``)."""

    worker_threads: int = attrs.field(
        default=1,
        validator=_at_least_one,
        metadata={"help": "device threads running queued calls (more overlap calls)"},
    )
    queue_depth: int = attrs.field(
        default=16,
        validator=_at_least_one,
        metadata={"help": "calls that may wait in the device queue before a call blocks"},
    )


@attrs.frozen
class FastNpuOptions(NpuOptions):
    """Options of ``examplenpu_fast``: those of both plans, and how freezing folds."""

    optimize_numerics: bool = attrs.field(
        default=True,
        metadata={
            "help": "fold BatchNorm, add and mul into convolution weights while freezing "
            "(rounds differently, within fp32 limits); false keeps exact folds only"
        },
    )


class ExampleNpuProvider(Provider):
    """``examplenpu_fp32``: the model traced for tinynpu, weights as they are."""

    name = "examplenpu_fp32"
    precision = Precision.FP32
    # A challenger: it replaces the baseline only by beating it in the race.
    role = Role.CHALLENGER
    options_type: type[NpuOptions] = NpuOptions
    install_hint = INSTALL_HINT
    #: Whether the plan freezes the program (the fast plan does).
    freeze = False

    # -- probe: installed -> imports -> the device answers --------------------------
    def availability(self, context: ProviderContext) -> ProviderAvailability:
        """The layered probe; the base class catches what it raises and caches its answer."""
        version, problem = check_distribution(SDK_DISTRIBUTION, None, INSTALL_HINT)
        if problem:  # layer 1: metadata only, nothing imported
            return ProviderAvailability.unavailable(problem, INSTALL_HINT)
        sdk, error = try_import(SDK_MODULE)  # layer 2: the SDK imports
        if sdk is None:
            return ProviderAvailability.unavailable(
                f"the tinynpu SDK does not import: {error}", f"reinstall it: {INSTALL_HINT}"
            )
        sdk_version = str(getattr(sdk, "__version__", "unknown"))
        versions = {SDK_DISTRIBUTION: version, SDK_MODULE: sdk_version}
        if not version_satisfies(sdk_version, SDK_VERSIONS):
            return ProviderAvailability.unavailable(
                f"tinynpu {sdk_version} is installed; this provider needs {SDK_VERSIONS}",
                f"install a matching SDK: {INSTALL_HINT}",
                sdk_versions=versions,
            )
        index, problem = device_index(context.target)
        if index is None:
            return ProviderAvailability.unavailable(
                problem or "unsupported target",
                "race on --device tinynpu:0 --host cpu (ExecutionTarget('tinynpu:0', "
                "host='cpu')), or on --device cpu",
                sdk_versions=versions,
            )
        found = {d.index: d for d in sdk.devices()}  # layer 3: the device is there, answers
        if index not in found:
            return ProviderAvailability.unavailable(
                f"tinynpu device {index} is not visible (visible: {sorted(found) or 'none'}; "
                f"{sdk.VISIBLE_DEVICES_ENV} selects them)",
                f"unset {sdk.VISIBLE_DEVICES_ENV} or list device {index} in it",
                sdk_versions=versions,
            )
        round_trip_s = sdk.ping(index, timeout_s=2.0)
        return ProviderAvailability.ok(
            sdk_versions=versions,
            details={
                "device": found[index].name,
                "device_memory_mb": found[index].memory_bytes / 2**20,
                "ping_ms": round(round_trip_s * 1e3, 3),
            },
        )

    # -- build ------------------------------------------------------------------------
    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        """Compile for the prepared cases, save the program, open a device to run it."""
        sdk = _sdk()
        options: NpuOptions = self.plan_options(context)
        if not context.cases:
            raise ProviderBuildError(
                f"{self.name}: no prepared cases to compile for; dlopt passes them in "
                "context.cases during a race (tests: build a ProviderContext with cases=...)"
            )
        args, kwargs = context.example_inputs()
        try:
            # compile() copies the weights: the caller's model is never written to. It
            # traces the model: a graph that depends on input values is refused.
            with refuse_value_dependence(model, f"{self.name}: the model's tinynpu trace"):
                program = sdk.compile(
                    model,
                    args,
                    kwargs,
                    freeze=self.freeze,
                    optimize_numerics=getattr(options, "optimize_numerics", True),
                )
            path = program.save(self.plan_dir(context) / PROGRAM_FILE)
        except sdk.NpuError as exc:
            raise ProviderBuildError(f"{self.name}: {exc}") from exc
        # Specialize every case's shapes now, so that first calls are already asynchronous.
        return self._serve(program, context.target, options, path, context.cases)

    # -- load: serve a saved program again, without the model ----------------------
    def load(
        self, directory: Path, metadata: dict[str, Any], context: ProviderContext
    ) -> BuiltPlan:
        """Serve the program a built plan saved; ``directory`` holds its artifact files."""
        sdk = _sdk()
        name = metadata.get("program", PROGRAM_FILE)
        if not isinstance(name, str) or not is_plain_name(name):
            raise ProviderBuildError(f"{self.name}: metadata names no plain program file: {name!r}")
        path = Path(directory) / name
        if not path.is_file():
            raise ProviderBuildError(
                f"{self.name}: {path} is missing; was the bundle copied whole?"
            )
        try:
            program = sdk.load_program(path)
        except sdk.NpuError as exc:
            raise ProviderBuildError(f"{self.name}: {exc}") from exc
        if program.frozen != self.freeze:
            raise ProviderBuildError(
                f"{self.name}: {path} holds a {'frozen' if program.frozen else 'plain'} "
                f"program; it was built by the other example plan, load it with that one"
            )
        # The plan owns its artifacts in its own directory, whatever becomes of the bundle.
        owned = self.plan_dir(context) / PROGRAM_FILE
        if not owned.exists() or not owned.samefile(path):
            shutil.copyfile(path, owned)
        return self._serve(program, context.target, self.plan_options(context), owned)

    # -- shared plumbing ------------------------------------------------------------
    def _serve(
        self,
        program: tinynpu.Program,
        target: ExecutionTarget,
        options: NpuOptions,
        path: Path,
        cases: Sequence[PreparedCase] = (),
    ) -> BuiltPlan:
        """A BuiltPlan running ``program`` on a device of its own, specialized for the
        shapes of ``cases``."""
        sdk = _sdk()
        index, problem = device_index(target)
        if index is None:
            raise ProviderBuildError(f"{self.name}: {problem}")
        try:
            device = sdk.open_device(
                index, worker_threads=options.worker_threads, queue_depth=options.queue_depth
            )
        except sdk.NpuError as exc:
            raise ProviderBuildError(f"{self.name}: {exc}") from exc
        try:
            loaded = device.load(program)
            for case in cases:
                loaded.specialize(case.args, case.kwargs)
        except sdk.NpuError as exc:
            device.close()
            raise ProviderBuildError(f"{self.name}: {exc}") from exc
        except BaseException:
            device.close()
            raise
        return BuiltPlan(
            # Calling the plan enqueues; outputs are complete once synchronize() returns.
            runner=loaded,
            precision=self.precision,
            artifacts={PROGRAM_FILE: path},
            metadata={
                "sdk": SDK_MODULE,
                "sdk_version": sdk.__version__,
                "program": PROGRAM_FILE,
                "program_format": "torchscript",
                "frozen": program.frozen,
                "launch": device.launch,
                "options": attrs.asdict(options),
                "weights_mb": program.weight_bytes / 2**20,
            },
            on_close=device.close,
            synchronize=device.synchronize,
            device_memory_mb=lambda: device.memory_stats()["peak_bytes"] / 2**20,
            # One command queue per device, and programs specialised to the raced shapes:
            # callers one at a time, unseen shapes to eager (the safe defaults, stated).
            serving=ServingTraits(concurrency=Concurrency.SERIALIZED, dynamic_shapes=False),
        )


class ExampleNpuFastProvider(ExampleNpuProvider):
    """``examplenpu_fast``: the program frozen, BatchNorm folded into the convolutions.

    Still an fp32 plan: the folds change rounding only, within the fp32 limits.
    """

    name = "examplenpu_fast"
    options_type = FastNpuOptions
    freeze = True


def device_index(target: ExecutionTarget) -> tuple[int | None, str | None]:
    """The tinynpu device ``target`` names, or ``(None, why it names none)``.

    The SDK takes host tensors: plans are called with inputs on the host, so the target
    is ``ExecutionTarget("tinynpu:N", host="cpu")``. The fake device computes on host
    threads, so a plain ``cpu`` target races it too (on device 0).
    """
    if target.input_device.partition(":")[0] != "cpu":
        return None, (
            f"tinynpu takes host tensors, but this target calls plans with inputs on "
            f"{target.input_device!r}"
        )
    kind, _, index = target.device.partition(":")
    if kind == "tinynpu":
        return int(index or 0), None
    if kind == "cpu":
        return 0, None
    return None, f"tinynpu plans compute on a tinynpu device, not on {target.device!r}"


def _sdk() -> Any:
    """The SDK module, imported on first use (the probe already said it imports)."""
    import tinynpu

    return tinynpu
