"""AOTInductor packages: an Inductor plan saved as one compiled program.

A compiled plan (:mod:`dlopt_fx.compiled`) comes back in a fresh process by compiling
again, which even with torch's caches restored costs Dynamo tracing every input shape and
importing Inductor's compiler (seconds). Its package (``torch.export`` of the same
callable, the same Inductor options, ``aoti_compile_and_package``) is one ``.pt2`` file
that torch's C++ runtime loads without the model, Dynamo or the compiler. It is the same
computation compiled by another route, not the program the race timed, so whoever
serves it validates it and measures it again (the plan cache's revalidation does both).

The package takes the cases' tensor leaves as its inputs, in their flattened order; the
non-tensor leaves (equal on every case, or nothing is packaged) are constants of the
program. The dims that vary across the cases are dynamic (from 1 up), the rest static,
as the compiled plan marks them.

Loading executes the package's compiled code: the caller decides whether the file may be
trusted (dlopt loads one only from a hash-checked record in a directory only its user
can write).

:func:`save_plan_package` and :func:`load_package_plan` are what a provider's
``save_program`` and ``load_program`` call: the Inductor plans and TorchAO's PT2E static
int8 plan (whose converted int8 graph is packaged with its own Inductor options) share them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from dlopt.plugin import BuiltPlan, Precision, ProviderBuildError, ProviderContext

#: The package's file name in the program directory.
PACKAGE_FILE = "plan.pt2"
#: Non-tensor input values a package may hold as constants (they are written as JSON).
_CONSTANT_TYPES = (bool, int, float, str, type(None))


class PackageUnsupported(Exception):
    """This plan cannot be packaged for these cases (the reason is the message)."""


def _constants(leaves: Sequence[Any]) -> list[Any]:
    """The non-tensor leaves of flattened inputs, ``None`` where a tensor stands."""
    return [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]


class _FlatEntry(torch.nn.Module):
    """``call(*args, **kwargs)`` taking the cases' tensor leaves as positional inputs, so
    ``torch.export`` sees plain tensors; ``module`` is registered so its weights are
    lifted into the program."""

    def __init__(
        self, module: torch.nn.Module, call: Callable[..., Any], spec: Any, leaves: list[Any]
    ) -> None:
        super().__init__()
        self.module = module
        self._call = call
        self._spec = spec
        self._constants = _constants(leaves)
        self._tensor_at = [isinstance(leaf, torch.Tensor) for leaf in leaves]

    def forward(self, *tensors: torch.Tensor) -> Any:
        from torch.utils._pytree import tree_unflatten

        given = iter(tensors)
        leaves = [
            next(given) if is_tensor else constant
            for is_tensor, constant in zip(self._tensor_at, self._constants)
        ]
        args, kwargs = tree_unflatten(leaves, self._spec)
        return self._call(*args, **kwargs)


def save_package(
    module: torch.nn.Module,
    call: Callable[..., Any],
    cases: Sequence[Any],
    inductor_options: dict[str, Any],
    directory: Path,
) -> dict[str, Any]:
    """Export ``call`` (which runs ``module``) on the cases and compile it to
    ``directory/plan.pt2``; the metadata :class:`PackageRunner` needs (strict JSON).

    Raises :class:`PackageUnsupported` when the cases cannot share one program.
    """
    import torch._inductor
    from torch.utils._pytree import tree_flatten

    from dlopt_fx.compiled import options_as_json, varying_dims

    if not cases:
        raise PackageUnsupported("no cases to export the plan on")
    policy, marks = varying_dims(cases)
    if policy == "automatic":
        raise PackageUnsupported("the cases' inputs differ in structure or rank")
    flattened = [tree_flatten((case.args, case.kwargs)) for case in cases]
    spec = flattened[0][1]
    first = flattened[0][0]
    constants = _constants(first)
    if any(_constants(leaves) != constants for leaves, _ in flattened[1:]):
        raise PackageUnsupported("a non-tensor input differs between cases")
    if not all(isinstance(value, _CONSTANT_TYPES) for value in constants):
        raise PackageUnsupported("a non-tensor input is not a plain number, string or None")
    # Export on the case whose varying dims are largest: a size of 1 would be specialised.
    example, _ = max(
        flattened, key=lambda f: sum(f[0][i].shape[d] for i, dims in marks.items() for d in dims)
    )
    tensor_leaves = [i for i, leaf in enumerate(first) if isinstance(leaf, torch.Tensor)]
    dynamic = tuple(
        {d: torch.export.Dim(f"leaf{i}_dim{d}", min=1) for d in marks[i]} if i in marks else None
        for i in tensor_leaves
    )
    entry = _FlatEntry(module, call, spec, first)
    inputs = tuple(example[i] for i in tensor_leaves)
    start = time.perf_counter()
    with torch.no_grad():
        exported = torch.export.export(entry, inputs, dynamic_shapes=(dynamic,))
        export_s = time.perf_counter() - start
        directory.mkdir(parents=True, exist_ok=True)
        torch._inductor.aoti_compile_and_package(
            exported,
            package_path=str(directory / PACKAGE_FILE),
            inductor_configs=dict(inductor_options),
        )
    return {
        "file": PACKAGE_FILE,
        "input_spec": str(spec),
        "constants": constants,
        "dynamic_dims": {str(i): list(dims) for i, dims in sorted(marks.items())},
        "inductor_options": options_as_json(inductor_options),
        "export_time_s": round(export_s, 3),
        "compile_time_s": round(time.perf_counter() - start - export_s, 3),
        "torch": torch.__version__,
    }


class PackageRunner:
    """Calls a loaded package with the inputs the plan was raced with.

    Loaded through torch's C++ package loader directly (``torch._inductor``, whose import
    alone costs seconds, is not imported). A call whose input structure or constants
    differ from the package's is refused with a clear error: the program was compiled
    for exactly those.
    """

    def __init__(self, path: Path, metadata: dict[str, Any], device_index: int = -1) -> None:
        from torch.utils._pytree import treespec_loads

        self._spec = metadata["input_spec"]
        self._constants = list(metadata["constants"])
        # (path, model name, run single-threaded, runners, device index): what torch's
        # own aoti_load_package passes.
        self._loader = torch._C._aoti.AOTIModelPackageLoader(
            str(path), "model", False, 1, device_index
        )
        self._out_spec = treespec_loads(self._loader.get_call_spec()[1])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils._pytree import tree_flatten, tree_unflatten

        leaves, spec = tree_flatten((args, kwargs))
        constants = _constants(leaves)
        if str(spec) != self._spec or constants != self._constants:
            raise ValueError(
                "this AOTInductor package was compiled for inputs shaped like the workload's "
                f"cases ({self._spec}, constants {self._constants}); it was called with "
                f"{spec} (constants {constants}): build the plan again for these inputs"
            )
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        return tree_unflatten(self._loader.boxed_run(tensors), self._out_spec)


def save_plan_package(
    plan: str,
    runner: Any,
    cases: Sequence[Any],
    inductor_options: dict[str, Any],
    directory: Path,
) -> dict[str, Any]:
    """Package a built compiled plan: :func:`save_package` of what its runner was compiled
    from (``runner.source``: the module and the callable that runs it, set by the provider
    when it built the plan), with the Inductor options it compiled with.

    Raises :class:`~dlopt.plugin.ProviderBuildError` naming ``plan`` when the runner has no
    source (closed, or built elsewhere), and :class:`PackageUnsupported` when the cases
    cannot share one program.
    """
    source = getattr(runner, "source", None)
    if source is None:
        raise ProviderBuildError(f"{plan}: the plan was closed, or not built here")
    module, call = source
    return save_package(module, call, cases, inductor_options, directory)


def load_package_plan(
    directory: Path,
    metadata: dict[str, Any],
    context: ProviderContext,
    *,
    plan: str,
    precision: Precision,
    output_dtype: torch.dtype | None = None,
) -> BuiltPlan:
    """Plan ``plan`` served from the package :func:`save_plan_package` wrote in
    ``directory`` (``metadata``: what it returned), on ``context``'s target: no model, no
    Dynamo, no compile.

    Served as the compiled plan it was saved from is (:data:`COMPILED_SERVING`): one thread
    at a time, in the grad mode it was judged in, at the cases' input signatures. The
    package's C++ runtime takes inference tensors and ordinary ones alike.
    """
    from dlopt_fx.compiled import COMPILED_SERVING

    device = torch.device(context.target.device)
    index = -1 if device.type == "cpu" else (device.index or 0)
    runner = PackageRunner(directory / str(metadata["file"]), metadata, index)
    return BuiltPlan(
        runner=runner,
        precision=precision,
        output_dtype=output_dtype,
        metadata={
            "plan": plan,
            "served_as": "aotinductor_package",
            "package": {k: v for k, v in metadata.items() if k != "constants"},
        },
        serving=COMPILED_SERVING,
    )
