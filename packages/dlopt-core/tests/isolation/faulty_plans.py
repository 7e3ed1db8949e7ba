"""Test plans that take their process down, each importable by name in a worker.

The model sleeps in its forward, so the eager reference is slow and ``FastPlan`` (the
same linear layer without the sleep) wins every race by far: the decision is the same
whichever other plans take part, which is what a survived fault must leave intact.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from dlopt import InferenceOptimizer, OptimizationPolicy
from dlopt.contract.provider import BuiltPlan, ProviderAvailability
from dlopt.measurement import MeasurementPolicy
from dlopt.precision import Precision
from dlopt.settings.workload import WorkloadCase, WorkloadProfile

#: Long enough for any watchdog of these tests to fire first.
FOREVER_S = 3600.0


class SleepyLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.002)
        return self.linear(x)


def tiny_model() -> tuple[torch.nn.Module, WorkloadProfile]:
    """The factory the worker rebuilds the model from: ``faulty_plans:tiny_model``."""
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    return SleepyLinear().eval(), WorkloadProfile([WorkloadCase("small", args=(x,))])


def per_process_model() -> tuple[torch.nn.Module, WorkloadProfile]:
    """A factory whose weights differ in every process (drawn from the process id, which
    no seed reaches): the worker's model is not the host's."""
    model, workload = tiny_model()
    with torch.no_grad():
        for param in model.parameters():
            param.fill_(os.getpid() % 997 / 997)
    return model, workload


def segfault() -> None:
    """A native crash: read the byte at address 0."""
    ctypes.string_at(0)


class FaultyPlan:
    """A challenger serving ``model.linear`` whose ``fault`` strikes at one stage."""

    name = "faulty"
    #: The contract's declared precision (reports name it for a plan that never built).
    precision = Precision.FP32
    fault = ""
    #: The measured call (counted from the first call) the ``*_call`` faults strike at.
    strike_at_call = 8

    def probe(self, context: Any) -> ProviderAvailability:
        self._strike("probe")
        return ProviderAvailability.ok()

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        self._strike("build")
        linear = model.linear
        calls = 0

        def runner(x: torch.Tensor) -> torch.Tensor:
            nonlocal calls
            calls += 1
            if calls == self.strike_at_call:
                self._strike("call")
            return linear(x)

        return BuiltPlan(runner=runner)

    def _strike(self, where: str) -> None:
        stage, _, how = self.fault.partition(":")
        if stage != where:
            return
        if how == "segfault":
            segfault()
        elif how == "abort":
            os.abort()
        elif how == "exit":
            os._exit(7)
        elif how == "systemexit":
            sys.exit("the SDK gave up")
        elif how == "hang":
            time.sleep(FOREVER_S)


class FastPlan(FaultyPlan):
    name = "fast"


class SavedProgramPlan(FaultyPlan):
    """``fast`` that also saves itself as a program (its weights as JSON) and serves it
    without the model: what a plan cache record brings back into the host. It saves what
    its own runner holds, as the Inductor plans save the module their runner compiled."""

    name = "fast_program"

    def save_program(self, plan: BuiltPlan, directory: Path, context: Any) -> dict[str, Any]:
        return dict(plan.runner.weights)

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        plan = super().build(model, context)
        linear = model.linear
        plan.runner.weights = {"weight": linear.weight.tolist(), "bias": linear.bias.tolist()}
        return plan

    def load_program(self, directory: Path, metadata: dict[str, Any], context: Any) -> BuiltPlan:
        weight, bias = torch.tensor(metadata["weight"]), torch.tensor(metadata["bias"])
        return BuiltPlan(
            runner=lambda x: torch.nn.functional.linear(x, weight, bias),
            metadata={"served_as": "program"},
        )


class LoadsArtifacts(FaultyPlan):
    """``fast`` that writes its weights to a file it owns and serves again from that file
    (``load``), as the ONNX Runtime and OpenVINO plans do; each build in a process is
    counted in the file :data:`BUILDS_ENV` names, so a test sees which processes built."""

    name = "fast_loaded"
    WEIGHTS = "weights.json"

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        with open(os.environ[BUILDS_ENV], "a") as builds:
            builds.write(f"{os.getpid()}\n")
        linear = model.linear
        path = context.plan_dir(self.name) / self.WEIGHTS
        path.write_text(
            json.dumps({"weight": linear.weight.tolist(), "bias": linear.bias.tolist()})
        )
        plan = super().build(model, context)
        plan.artifacts = {self.WEIGHTS: path}
        return plan

    def load(self, directory: Path, metadata: dict[str, Any], context: Any) -> BuiltPlan:
        saved = json.loads((Path(directory) / self.WEIGHTS).read_text())
        weight, bias = torch.tensor(saved["weight"]), torch.tensor(saved["bias"])
        return BuiltPlan(
            runner=lambda x: torch.nn.functional.linear(x, weight, bias),
            metadata={"served_as": "loaded"},
        )


#: The environment variable naming the file :class:`LoadsArtifacts` counts builds in.
BUILDS_ENV = "DLOPT_TEST_BUILDS_FILE"


#: The environment variable holding the host's process id, for :class:`WrongInHost`.
HOST_PID_ENV = "DLOPT_TEST_HOST_PID"


class WrongInHost(FaultyPlan):
    """``fast`` whose outputs are off by one in the process :data:`HOST_PID_ENV` names: it
    wins the worker's race and fails validation when the host brings it back."""

    name = "wrong_in_host"

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        linear = model.linear
        offset = 1.0 if os.environ.get(HOST_PID_ENV) == str(os.getpid()) else 0.0
        return BuiltPlan(runner=lambda x: linear(x) + offset)


class WritesArtifacts(FaultyPlan):
    """``fast`` that writes its model file into its plan directory, as an exporter does:
    what a selection must not leave behind in the temp directory."""

    name = "fast_artifact"

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        (context.plan_dir(self.name) / "model.bin").write_bytes(b"\0" * 4096)
        return super().build(model, context)


#: The environment variable naming the file :class:`StartsProcesses` writes the process
#: ids it started to, one per line.
PIDS_FILE_ENV = "FAULTY_PLANS_PIDS_FILE"


def start_helpers() -> None:
    """Start what an SDK might and never end it: a child in this process's group, one in
    a session of its own (``setsid``) and a daemon whose parent exits at once (an
    orphan). Their ids go to the file ``$FAULTY_PLANS_PIDS_FILE`` names."""
    import subprocess

    same_group = subprocess.Popen(["sleep", "600"])
    own_session = subprocess.Popen(["sleep", "600"], start_new_session=True)
    daemon = subprocess.run(
        ["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    pids = [same_group.pid, own_session.pid, int(daemon.stdout.strip())]
    with open(os.environ[PIDS_FILE_ENV], "a", encoding="utf-8") as file:
        file.write("".join(f"{pid}\n" for pid in pids))


class StartsProcesses(FaultyPlan):
    """A plan that starts helpers (:func:`start_helpers`) as it builds. It is slower than
    the reference, so it is built in the worker only."""

    name = "starts_processes"

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        start_helpers()
        plan = super().build(model, context)
        fast = plan.runner

        def slow(x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.01)  # slower than the reference: it never wins, never comes back
            return fast(x)

        return BuiltPlan(runner=slow)


class StartsProcessesAndWins(FaultyPlan):
    """A plan that starts helpers (:func:`start_helpers`) each time it is built and wins:
    the host brings it back from the worker, and its helpers start there too."""

    name = "starts_processes_and_wins"

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        start_helpers()
        return super().build(model, context)


#: The name of the file :class:`LittersTempDirAndWins` writes the way native code does.
NATIVE_LITTER = ".ses"


class LittersTempDirAndWins(FaultyPlan):
    """A plan that writes into the temp directory each time it is built, as SDKs do
    (Python's ``tempfile`` for a compile cache, ``$TMPDIR`` read by native code), and
    wins: the host brings it back from the worker, and writes there too."""

    name = "litters_temp_dir_and_wins"

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        import tempfile

        handle, _ = tempfile.mkstemp(prefix="compile-cache-")
        os.close(handle)
        native = os.path.join(os.environ.get("TMPDIR", "/tmp"), NATIVE_LITTER)
        with open(native, "w", encoding="utf-8") as file:
            file.write(str(os.getpid()))
        return super().build(model, context)


#: The last line :class:`PrintsWithoutEnd` prints before it crashes.
LAST_WORDS = "prints_without_end: the last line before the crash"


class PrintsWithoutEnd(FaultyPlan):
    """Prints 8 MiB to stdout and stderr while it builds, its last words, then segfaults
    on its 8th call: the host keeps the tail of what it printed, never all of it."""

    name = "prints_without_end"
    fault = "call:segfault"

    def build(self, model: torch.nn.Module, context: Any) -> BuiltPlan:
        line = "x" * 1023 + "\n"
        for stream in (sys.stdout, sys.stderr):
            for _ in range(4096):
                stream.write(line)
            stream.flush()
        print(LAST_WORDS, flush=True)
        return super().build(model, context)


#: The faulty plans: class name (what a worker imports) -> (plan name, ``stage:how``).
FAULTS = {
    "SegfaultsWhenCalled": ("segfaults_when_called", "call:segfault"),
    "AbortsInBuild": ("aborts_in_build", "build:abort"),
    "ExitsInBuild": ("exits_in_build", "build:exit"),
    "SystemExitInBuild": ("systemexit_in_build", "build:systemexit"),
    "SegfaultsInProbe": ("segfaults_in_probe", "probe:segfault"),
    "HangsInProbe": ("hangs_in_probe", "probe:hang"),
    "HangsInBuild": ("hangs_in_build", "build:hang"),
    "HangsWhenCalled": ("hangs_when_called", "call:hang"),
}

# One module-level class per fault, so a worker rebuilds each by ``faulty_plans:<class>``.
for _class_name, (_name, _fault) in FAULTS.items():
    globals()[_class_name] = type(
        _class_name, (FaultyPlan,), {"name": _name, "fault": _fault, "__module__": __name__}
    )


@contextlib.contextmanager
def bounded(seconds: int) -> Iterator[None]:
    """Fail (not hang) when the body runs past ``seconds``."""

    def overrun(signum: int, frame: object) -> None:
        raise TimeoutError(f"the test ran past its own bound of {seconds} s")

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def isolated_policy(*plans: str, **overrides: object) -> OptimizationPolicy:
    """Race the reference, ``fast`` and ``plans`` with watchdogs of a few seconds."""
    values: dict[str, object] = {
        "isolation": "process",
        "include": ("eager_fp32", "fast", *plans),
        # The race stops once resolved (three rounds here); the budget only bounds a slow
        # machine.
        "measurement": MeasurementPolicy(max_time_s=5.0, seed=3),
        "build_timeout_s": 4.0,
        "call_timeout_floor_s": 2.0,
        "probe_timeout_s": 2.0,
        # Every included plan is built and raced: these tests are about faults, not
        # about which plans a time budget would leave out.
        "exhaustive": True,
    }
    values.update(overrides)
    return OptimizationPolicy(**values)  # type: ignore[arg-type]


def select_isolated(
    culprits: tuple[type, ...], seconds: int, events: list[Any]
) -> tuple[Any, OptimizationPolicy]:
    """Select for ``tiny_model`` in workers, racing the reference, ``fast`` and
    ``culprits``, within ``seconds``; every event is appended to ``events``.
    ``(decision, policy)``."""
    policy = isolated_policy(*(c.name for c in culprits))
    with bounded(seconds):
        optimizer = optimizer_with(*culprits, policy=policy, observers=[events.append])
        return optimizer.select("faulty_plans:tiny_model"), policy


def optimizer_with(
    *culprits: type, policy: OptimizationPolicy, observers: Any = ()
) -> InferenceOptimizer:
    """An optimizer racing ``fast`` and ``culprits`` (explicit providers)."""
    providers = [FastPlan(), *(c() for c in culprits)]
    return InferenceOptimizer("cpu", policy, providers, observers=observers)
