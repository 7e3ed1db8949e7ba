"""Simulated Torch-TensorRT installs: torch-tensorrt cannot be installed on CI machines, so
every probe state and the option translation are checked against fakes."""

from __future__ import annotations

import importlib.metadata
import inspect
import types
from collections import namedtuple
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import dlopt.platform.probing
from dlopt_tensorrt import provider as provider_module

Features = namedtuple("Features", ["dynamo_frontend", "torch_tensorrt_runtime"])


def _release_compile(*options: str) -> Callable[..., Any]:
    """A stand-in for one release's ``torch_tensorrt.dynamo.compile``: its signature takes
    ``options`` by keyword (dlopt reads only the parameter names)."""

    def compile(exported_program: Any, inputs: Any = None, **kwargs: Any) -> Any:
        """Never called: the fake module's own ``compile`` records the calls."""

    *positional, var_keyword = inspect.signature(compile).parameters.values()
    keyword = [inspect.Parameter(o, inspect.Parameter.KEYWORD_ONLY, default=None) for o in options]
    compile.__signature__ = inspect.Signature([*positional, *keyword, var_keyword])  # type: ignore[attr-defined]
    return compile


_INPUTS = ("arg_inputs", "kwarg_inputs", "device", "disable_tf32")
_BUILDER = ("workspace_size", "optimization_level", "timing_cache_path")
_AUTOCAST = ("enable_autocast", "autocast_low_precision_type")
_APIS = {
    # A strongly typed release (no enabled_precisions).
    "new": _release_compile(*_INPUTS, "min_block_size", *_AUTOCAST, *_BUILDER),
    # A weakly typed release (precision through enabled_precisions).
    "legacy": _release_compile(
        *_INPUTS, "enabled_precisions", "use_explicit_typing", "min_block_size", *_BUILDER
    ),
    # A release without the builder's workspace and optimization-level options.
    "minimal": _release_compile("device", "disable_tf32", *_AUTOCAST, "min_block_size"),
}


class FakeInput:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        assert not args, "dlopt passes Input options by keyword"
        self.kwargs = kwargs


class FakeTorchTensorRT(types.ModuleType):
    """Records compile/save calls; "compiles" by returning the module it was given.

    It behaves as Torch-TensorRT 2.13 does where dlopt has been caught out: a
    ``torch.device("cuda")`` without an index becomes ``cuda:None`` and fails, and
    ``save`` retraces by default (``retrace=True``), so a program saved with example
    tensors accepts only their shapes once loaded.
    """

    def __init__(self, api: str, tensorrt_version: str | None, dynamo: bool) -> None:
        super().__init__("torch_tensorrt")
        self.__version__ = "2.13.0"
        if tensorrt_version is not None:
            self.__tensorrt_version__ = tensorrt_version
        self.__cuda_version__ = "12.6"
        self.ENABLED_FEATURES = Features(dynamo, True)
        self.Input = FakeInput
        self.dynamo = types.SimpleNamespace(compile=_APIS[api])
        self.compile_calls: list[dict[str, Any]] = []
        self.save_calls: list[dict[str, Any]] = []
        self.fail_with: Exception | None = None
        self.saved: dict[str, tuple[Any, list[tuple[int, ...]] | None]] = {}

    def compile(self, module: Any, **kwargs: Any) -> Any:
        self.compile_calls.append({"module": module, **kwargs})
        if self.fail_with is not None:
            raise self.fail_with
        device = kwargs.get("device")
        if isinstance(device, torch.device) and device.type == "cuda" and device.index is None:
            raise RuntimeError("Invalid device string: 'cuda:None'")
        return module

    def save(
        self,
        module: Any,
        file_path: str = "",
        *,
        extra_files: Any = None,
        output_format: str = "exported_program",
        inputs: Any = None,
        arg_inputs: Any = None,
        kwarg_inputs: Any = None,
        retrace: bool = True,
        dynamic_shapes: Any = None,
        **kwargs: Any,
    ) -> None:
        self.save_calls.append(
            {
                "module": module,
                "path": file_path,
                "output_format": output_format,
                "arg_inputs": arg_inputs,
                "kwarg_inputs": kwarg_inputs,
                "retrace": retrace,
                **kwargs,
            }
        )
        examples = list(inputs or arg_inputs or [])
        # Retraced with plain tensors: torch.export specializes on their shapes.
        static = (
            retrace
            and dynamic_shapes is None
            and all(isinstance(x, torch.Tensor) for x in examples)
        )
        self.saved[file_path] = (module, [tuple(x.shape) for x in examples] if static else None)
        Path(file_path).write_bytes(b"fake program")

    def load(self, file_path: str) -> Any:
        module, shapes = self.saved[file_path]

        def run(*args: Any) -> Any:
            got = [tuple(a.shape) for a in args]
            if shapes is not None and got != shapes:
                raise RuntimeError(f"the saved program was specialized to {shapes}, got {got}")
            return module(*args)

        return types.SimpleNamespace(module=lambda: run)


def fake_metadata(
    monkeypatch: Any,
    version: str | None = "2.13.0",
    requires: list[str] | None = None,
) -> None:
    """Make torch-tensorrt look installed (or not) to the metadata layer."""
    real_version = dlopt.platform.probing.distribution_version
    monkeypatch.setattr(
        dlopt.platform.probing,
        "distribution_version",
        lambda name: version if name == "torch-tensorrt" else real_version(name),
    )
    real_requires = importlib.metadata.requires

    def fake_requires(name: str) -> list[str] | None:
        if name != "torch-tensorrt":
            return real_requires(name)
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return (
            requires
            if requires is not None
            else ["torch<2.14.0,>=2.13.0", "packaging", "tensorrt-cu13-libs<11.1.0,>=11.0.0"]
        )

    monkeypatch.setattr(importlib.metadata, "requires", fake_requires)


def fake_gpu(monkeypatch: Any, capability: tuple[int, int] | None) -> None:
    """A CUDA device of ``capability`` (``None``: no CUDA device at all)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: capability is not None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0 if capability is None else 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


@pytest.fixture
def fake_trt(monkeypatch: Any) -> Callable[..., FakeTorchTensorRT]:
    """Install a fake torch_tensorrt, metadata and a GPU; returns the module."""

    def install(
        api: str = "new",
        tensorrt_version: str | None = "10.14.1",
        capability: tuple[int, int] | None = (9, 0),
        dynamo: bool = True,
    ) -> FakeTorchTensorRT:
        module = FakeTorchTensorRT(api, tensorrt_version, dynamo)
        monkeypatch.setitem(__import__("sys").modules, "torch_tensorrt", module)
        fake_metadata(monkeypatch)
        fake_gpu(monkeypatch, capability)
        # CPU-only torch cannot move modules to "cuda"; the fake engine runs on CPU.
        monkeypatch.setattr(provider_module, "_place", lambda module, device: module)
        return module

    return install


@pytest.fixture
def sim(monkeypatch: Any) -> types.SimpleNamespace:
    """Helpers that simulate one layer at a time: ``sim.metadata(...)``, ``sim.gpu(...)``."""
    return types.SimpleNamespace(
        metadata=lambda version="2.13.0", requires=None: fake_metadata(
            monkeypatch, version, requires
        ),
        gpu=lambda capability: fake_gpu(monkeypatch, capability),
    )


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(features).relu()


@pytest.fixture
def net() -> torch.nn.Module:
    """The small model the faked builds compile: ``features`` (N x 16) -> Linear(16, 4) ->
    ReLU, in eval mode."""
    return Net().eval()
