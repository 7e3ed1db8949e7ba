"""Every dev task: tests, lint, typecheck, demo, benchmarks.

    python3 -m pip install nox && python3 -m nox -s tests    # the full test suite
    python3 -m nox -s demo                                   # dlopt select --demo
    python3 -m nox -l                                        # list sessions

torch is pinned so pip takes the CPU wheel that installs in seconds on the dev and CI
machines; an open range could resolve to a multi-GB CUDA build. Sessions use pip-backed
virtualenvs on purpose.
"""

from __future__ import annotations

from pathlib import Path

import nox
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
TORCH = "torch==2.13.0"
CORE = "packages/dlopt-core"
PROVIDERS = {
    # distribution dir -> pip requirement with the CPU-usable SDK extra
    "fx": "packages/dlopt-fx",
    "onnxruntime": "packages/dlopt-onnxruntime[cpu]",
    "torchao": "packages/dlopt-torchao",
    "tensorrt": "packages/dlopt-tensorrt",
    "openvino": "packages/dlopt-openvino",
}
#: The worked third-party provider distribution: CI installs and tests it like a user would.
EXAMPLE = "examples/dlopt-example-npu"
# safetensors: `dlopt select --inputs FILE.safetensors` is tested with real files.
TEST_DEPS = ["pytest>=8", "hypothesis>=6.100", "safetensors>=0.4"]
#: Hugging Face's BertModel (a tiny random one: the OpenVINO plans race a model called with
#: keyword inputs that returns a ModelOutput). transformers 5.x needs a `kernels` release
#: the package index does not have.
TRANSFORMERS = "transformers==4.57.6"


def _install(session: nox.Session, *providers: str) -> None:
    # torch first and pinned: every later requirement then finds it satisfied.
    session.install(TORCH)
    editable = [CORE, *(PROVIDERS[name] for name in providers)]
    session.install(*[arg for path in editable for arg in ("-e", path)])


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Core plus every provider with its CPU-usable SDK and the example third-party
    provider: every distribution's tests and the cross-distribution tests in
    tests/integration (pyproject's testpaths)."""
    _install(session, *PROVIDERS)
    session.install("-e", EXAMPLE)
    # Figures, the Ray fleet and Prometheus metrics are optional for users; the full suite
    # tests them all (fsspec: the fleet's result store at an fsspec URL, tested on its
    # in-memory filesystem).
    session.install("-e", f"{CORE}[plots,fleet,metrics]", "fsspec", TRANSFORMERS, *TEST_DEPS)
    session.run("pytest", *(session.posargs or []))


@nox.session(python=PYTHON, name="tests-serving")
def tests_serving(session: nox.Session) -> None:
    """The serving contract end to end (``pytest -m serving``): every first-party plan
    family that can win on a CPU selected, then served in each grad mode, from 4 threads
    and at a batch size it never raced; again after a plan cache hit and from
    ``load_bundle`` in a fresh process; and the README's Python example as written. Each
    selection compiles or exports, so it is its own session (CI runs it after ``tests``)."""
    _install(session, *PROVIDERS)
    session.install(*TEST_DEPS)
    session.run("pytest", "-m", "serving", *(session.posargs or ["tests/integration"]))


@nox.session(python=PYTHON, name="tests-deploy")
def tests_deploy(session: nox.Session) -> None:
    """The servers end to end (``pytest -m deploy``): ``dlopt serve`` as a Ray Serve
    application with two replicas answering HTTP and stopped by SIGTERM, and a decision
    bound to a real PyTriton server. Its own session: PyTriton pins numpy below 2 and its
    server takes a few seconds to start and stop (CI runs it after ``tests-serving``)."""
    _install(session)
    session.install("-e", f"{CORE}[serve,triton]", "tritonclient[http]", *TEST_DEPS)
    session.run("pytest", "-m", "deploy", *(session.posargs or [f"{CORE}/tests/deploy"]))


@nox.session(python=PYTHON, name="tests-core")
def tests_core(session: nox.Session) -> None:
    """Core alone: proves dlopt-core works with no provider distribution installed."""
    _install(session)
    session.install(*TEST_DEPS)
    session.run("pytest", f"{CORE}/tests", *session.posargs)


def _floors(pyproject: str) -> list[str]:
    """``name>=X`` -> ``name==X`` for every dependency that applies to ``PYTHON``."""
    with open(pyproject, "rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    pins = []
    for line in dependencies:
        requirement = Requirement(line)
        if requirement.marker and not requirement.marker.evaluate({"python_version": PYTHON}):
            continue
        (floor,) = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        pins.append(f"{requirement.name}=={floor}")
    return pins


@nox.session(python=PYTHON, name="tests-min")
def tests_min(session: nox.Session) -> None:
    """Core's tests on the oldest release of every dependency its metadata allows.

    torch's floor is the release the other sessions pin: older CPU wheels are not
    reachable from the CI machines, so the metadata claims only what is tested.
    """
    floors = _floors(f"{CORE}/pyproject.toml")
    torch_floor = next(pin for pin in floors if pin.startswith("torch=="))
    if Version(torch_floor.split("==")[1]) != Version(TORCH.split("==")[1]):
        session.error(f"dlopt-core allows {torch_floor} but the sessions test {TORCH}")
    # torch first, as the tested CPU wheel; pytest and hypothesis then resolve to releases
    # that accept the other floors (pluggy's, say).
    session.install(TORCH)
    session.install(*[pin for pin in floors if pin != torch_floor], *TEST_DEPS)
    session.install("--no-deps", "-e", CORE)
    session.run("python", "-m", "pip", "check")
    session.run("pytest", f"{CORE}/tests", *session.posargs)


@nox.session(python=PYTHON, name="tests-provider")
@nox.parametrize("provider", list(PROVIDERS))
def tests_provider(session: nox.Session, provider: str) -> None:
    """One provider distribution on top of core, nothing else installed."""
    _install(session, provider)
    session.install(*TEST_DEPS)
    session.run("pytest", PROVIDERS[provider].split("[")[0] + "/tests", *session.posargs)


@nox.session(python=PYTHON)
def gpu(session: nox.Session) -> None:
    """The GPU-marked tests (``pytest -m gpu``) on a machine with a CUDA device.

    torch is not pinned here: the CPU wheel the other sessions pin cannot see a GPU, so
    the machine's CUDA torch must already satisfy the distributions' ranges. Without a
    CUDA device every test skips with the probe's reason. tools/gpu/device_check.sh runs
    the same tests plus the CLI and a race on a GPU machine that has no package registry.
    """
    editable = [CORE, *(path.replace("[cpu]", "[gpu]") for path in PROVIDERS.values())]
    session.install(*[arg for path in editable for arg in ("-e", path)], *TEST_DEPS)
    session.run("pytest", "-m", "gpu", *session.posargs)


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """dlopt's main job on the built-in demo model."""
    _install(session, "fx", "onnxruntime", "torchao", "openvino")
    # Figures: the README's `dlopt export` and HTML report commands, run in .nox/demo.
    session.install("-e", f"{CORE}[plots]")
    session.run(
        "dlopt",
        "select",
        "--demo",
        *(session.posargs or ["--report", "artifacts/demo-report.json"]),
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy over core and every provider's sources (each checked on its own)."""
    _install(session, *PROVIDERS)
    session.install("-e", EXAMPLE)
    session.install("mypy>=1.10", *TEST_DEPS)
    session.run("mypy", "packages/dlopt-core/src/dlopt")
    for name in PROVIDERS:
        session.run("mypy", f"packages/dlopt-{name}/src")
    session.run("mypy", f"{EXAMPLE}/src")


@nox.session(python=PYTHON, name="tests-example")
def tests_example(session: nox.Session) -> None:
    """The worked third-party provider on core alone, installed as its users would."""
    _install(session)
    session.install("-e", EXAMPLE)
    session.install(*TEST_DEPS)
    session.run("dlopt", "providers", "--options", "examplenpu_fast")
    session.run("pytest", f"{EXAMPLE}/tests", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks print ratios measured side by side; name scripts to run, each with args.

    nox -s bench                                         # measurement_kernel.py
    nox -s bench -- fx_inductor_plans onnxruntime_plans  # by name (benchmarks/<name>.py)
    nox -s bench -- onnxruntime_plans --models mlp       # arguments follow their script
    """
    _install(session, "fx", "onnxruntime", "torchao")
    runs: list[list[str]] = []
    for arg in session.posargs or ["measurement_kernel"]:
        script = _bench_script(arg)
        if script is not None:
            runs.append([script])
        elif runs:
            runs[-1].append(arg)
        else:
            session.error(f"{arg!r} is not a benchmark: name one of {_bench_names()}")
    for command in runs:
        session.run("python", *command)


#: The benchmark suite's own stack: torchvision needs the torch it was built with, and
#: both lie on the dev machines' disk (a CUDA build of torch; the suite races CPU plans).
SUITE_TORCH = ("torch==2.14.1", "torchvision==0.29.1")
#: The peer product the suite measures dlopt against, and Hugging Face's BertModel
#: (transformers 5.x needs a `kernels` release the package index does not have).
SUITE_DEPS = ("custom-dl-optimizer==3.0.0", TRANSFORMERS)


@nox.session(python=PYTHON, name="bench-suite")
def bench_suite(session: nox.Session) -> None:
    """The benchmark suite: dlopt vs the peer vs an oracle on 9 workloads (docs/benchmarks/).

    nox -s bench-suite                                  # the full run (60-75 minutes on 2 cores)
    nox -s bench-suite -- --quick --models mlp          # a smoke run: numbers meaningless
    nox -s bench-suite -- tests                         # the suite's own unit tests
    """
    session.install(*SUITE_TORCH)
    suite_providers = ("fx", "onnxruntime", "torchao", "openvino")
    editable = [f"{CORE}[plots]", *(PROVIDERS[name] for name in suite_providers)]
    session.install(*[arg for path in editable for arg in ("-e", path)])
    session.install(*SUITE_DEPS, "pytest>=8")
    if session.posargs[:1] == ["tests"]:
        session.run(
            "pytest", "-q", "-p", "no:cacheprovider", "benchmarks/suite/tests", *session.posargs[1:]
        )
        return
    session.run("python", "-m", "benchmarks.suite", *session.posargs)


def _bench_names() -> list[str]:
    return sorted(p.stem for p in Path("benchmarks").glob("[!_]*.py"))


def _bench_script(arg: str) -> str | None:
    """``onnxruntime_plans``, ``onnxruntime_plans.py`` or a path -> the script's path."""
    if arg.startswith("-"):
        return None
    for candidate in (Path(arg), Path("benchmarks") / arg, Path("benchmarks") / f"{arg}.py"):
        if candidate.suffix == ".py" and candidate.is_file():
            return str(candidate)
    return None
