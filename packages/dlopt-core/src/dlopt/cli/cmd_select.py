"""``dlopt select``: race every eligible plan on a model and inputs given in a shell."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import attrs

from dlopt.cli.cmd_cache import add_cache_argument, cache_dir_of, cache_line, check_cache_dir
from dlopt.cli.cmd_report import print_report
from dlopt.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_isolation_choice,
    add_target_arguments,
    add_verbose_argument,
    captured_chatter,
    cli_target,
    finish_command,
    isolated,
    show_chatter,
)
from dlopt.cli.console import Output, wants_plain
from dlopt.cli.objectives import (
    add_objective_arguments,
    batched,
    check_objective_arguments,
    objective_of,
    races_batches,
    warn_retired,
)
from dlopt.cli.preflight import (
    check_count,
    check_input_path,
    check_input_sizes,
    check_output_dir,
    check_output_file,
    check_positive,
    check_shape,
    check_weight,
    check_weights,
)
from dlopt.errors import ConfigurationError, WorkloadError
from dlopt.measurement import MeasurementPolicy
from dlopt.settings.policy import (
    AUTO_BUDGET_BASE_S,
    AUTO_BUDGET_PER_CALL,
    MAX_TIME_BUDGET_S,
    OBJECTIVES,
    DeploymentConstraints,
    OptimizationPolicy,
)
from dlopt.vocabulary import GradMode, UnseenSignature

_DTYPES = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "int": "int32",
    "bool": "bool",
}
_SHAPE = re.compile(r"^\d+(x\d+)*$")


def parse_input_spec(spec: str) -> tuple[tuple[int, ...], str]:
    """``"8x3x224x224[:dtype]"`` -> ``((8, 3, 224, 224), "float32")``."""
    shape_text, colon, dtype_text = spec.partition(":")
    if not _SHAPE.match(shape_text):
        raise WorkloadError(
            f"bad input shape {spec!r}: write dimensions joined by 'x', e.g. 8x3x224x224[:float16]"
        )
    if colon and not dtype_text:
        raise WorkloadError(
            f"{spec!r} ends in ':' with no dtype after it; write SHAPE:DTYPE (e.g. "
            f"{shape_text}:float16) or the shape alone for float32"
        )
    dtype = _DTYPES.get((dtype_text or "float32").lower())
    if dtype is None:
        raise WorkloadError(
            f"unknown dtype {dtype_text!r} in {spec!r}; use one of {', '.join(sorted(set(_DTYPES)))}"
        )
    shape = tuple(int(d) for d in shape_text.split("x"))
    check_shape(shape, spec)
    return shape, dtype


def parse_plan_options(specs: list[str]) -> dict[str, dict[str, Any]]:
    """``["onnxruntime_cpu.intra_op_threads=2"]`` -> ``{"onnxruntime_cpu": {"intra_op_threads": 2}}``.

    A value is read as JSON when it parses (``2``, ``true``, ``"x"``, ``[1, 2]``) and kept
    as text otherwise (``basic``); the plan's option types then check it.
    """
    import json

    options: dict[str, dict[str, Any]] = {}
    for spec in specs:
        key, sep, text = spec.partition("=")
        plan, dot, name = key.partition(".")
        if not sep or not dot or not plan or not name:
            raise ConfigurationError(
                f"bad --option {spec!r}: write PLAN.OPTION=VALUE, e.g. "
                "onnxruntime_cpu.intra_op_threads=2 (`dlopt providers --options PLAN` lists them)"
            )
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        options.setdefault(plan, {})[name] = value
    return options


def parse_case_spec(spec: str) -> tuple[str, tuple[int, ...], str, float]:
    """``"NAME=SHAPE[:dtype]@WEIGHT"`` -> ``(name, shape, dtype, weight)``."""
    name, sep, rest = spec.partition("=")
    if not sep or not name:
        raise WorkloadError(
            f"bad --case {spec!r}: write NAME=SHAPE[:dtype]@WEIGHT, e.g. batch-8=8x3x224x224@25"
        )
    shape_spec, _, weight_text = rest.partition("@")
    try:
        weight = float(weight_text) if weight_text else 1.0
    except ValueError:
        raise WorkloadError(
            f"bad weight {weight_text!r} in --case {spec!r}: use a number"
        ) from None
    check_weight(weight, spec)
    shape, dtype = parse_input_spec(shape_spec)
    return name, shape, dtype, weight


def _random_input(shape: tuple[int, ...], dtype: str, seed: int) -> Any:
    import torch

    generator = torch.Generator().manual_seed(seed)
    torch_dtype = getattr(torch, dtype)
    if torch_dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(torch_dtype)
    if torch_dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    return torch.randint(0, 100, shape, generator=generator).to(torch_dtype)


def load_factory(spec: str) -> tuple[Any, Any]:
    """Import ``MODULE:FACTORY`` and call it: ``(model, workload or None)``.

    The factory returns an ``nn.Module``, or a ``(model, WorkloadProfile)`` pair so that
    the user's own representative inputs race. A module or factory that raises (any
    exception, or ``SystemExit``) is the user's code failing, reported as a
    :class:`ConfigurationError` naming the exception.
    """
    from dlopt.isolation.transfer import call_factory

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"bad model {spec!r}: write MODULE:FACTORY, e.g. mypkg.models:build_resnet"
        )
    _working_directory_last_on_path()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    except (Exception, SystemExit) as exc:
        raise ConfigurationError(
            f"importing {module_name!r} for {spec} raised {_describe(exc)}; "
            f"run `python -c 'import {module_name}'` to see where"
        ) from exc
    factory = getattr(module, attr, None)
    if factory is None:
        raise ConfigurationError(f"{module_name!r} has no attribute {attr!r}")
    return call_factory(factory, spec)


def _working_directory_last_on_path() -> None:
    """Let users name modules in the working directory, after the installed packages:
    a stray ``onnxruntime.py`` there must never shadow an SDK (for the factory's import
    or any SDK imported later in this process)."""
    cwd = os.getcwd()
    here = {"", ".", cwd}
    sys.path[:] = [entry for entry in sys.path if entry not in here] + [cwd]


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def check_outputs(
    report: str | None,
    bundle: str | None,
    *,
    inputs: str | None = None,
    artifacts: str | None = None,
) -> None:
    """Refuse ``--report``/``--bundle``/``--artifacts`` paths that cannot be written, or
    that would overwrite ``--inputs``, before the race."""
    from dlopt.bundle.store import check_bundle_destination

    read = [("--inputs", inputs)] if inputs else []
    check_output_file("--report", report, what="the report", inputs=read)
    check_output_dir("--artifacts", artifacts, what="plan artifacts", inputs=read)
    if bundle is not None:
        check_output_dir("--bundle", bundle, what="the bundle", inputs=read, replaced_whole=True)
        try:
            root = check_bundle_destination(bundle)
        except ValueError as exc:
            raise ConfigurationError(f"--bundle {bundle}: {exc}") from None
        if report and Path(os.path.abspath(report)).is_relative_to(root):
            raise ConfigurationError(
                f"--report {report} lies inside --bundle {bundle}, which is written whole and "
                "holds its own report.json; give a report path outside the bundle"
            )
    if (
        artifacts
        and report
        and Path(os.path.abspath(report)).is_relative_to(os.path.abspath(artifacts))
    ):
        raise ConfigurationError(
            f"--report {report} lies inside --artifacts {artifacts}, where plans write their "
            "files; give a report path outside it"
        )


def preflight_select(args: argparse.Namespace) -> None:
    """Everything ``dlopt select`` was told, checked before any model is imported or plan
    built: paths (the plan cache's too), numbers and the workload's shapes and weights
    (docs/checks.md)."""
    if args.inputs is not None:
        check_input_path("--inputs", args.inputs, what="a .npz or .safetensors inputs file")
    check_outputs(args.report, args.bundle, inputs=args.inputs, artifacts=args.artifacts)
    # The cache is read before the race and written after it: both must work now.
    check_cache_dir(args, writable=True)
    check_positive("--min-speedup", args.min_speedup, example="1.05")
    check_positive("--max-measure-time", args.max_measure_time, example="60")
    check_count("--expected-calls", args.expected_calls)
    check_count("--seed", args.seed, maximum=2**32 - 1)
    check_objective_arguments(args, parse_input_spec(args.input)[0] if args.input else None)
    if args.all_plans and args.time_budget is not None:
        raise ConfigurationError(
            "--all-plans builds and races every plan with no time budget, and --time-budget "
            "asks for one: give one of them (a budget skips the plans it has no room for)"
        )
    specs = [parse_case_spec(c) for c in args.case]
    if args.input:
        specs.insert(0, ("input", *parse_input_spec(args.input), 1.0))
    check_weights(weight for *_, weight in specs)
    if specs:
        check_input_sizes(specs)


def _on_target(model: Any, target: Any) -> Any:
    """Put the model the CLI built on the target device (the API leaves that to callers)."""
    import torch

    if target.is_cuda and not torch.cuda.is_available():
        raise ConfigurationError(
            f"device {target.device!r} requested but torch {torch.__version__} sees no CUDA "
            "device; use --device cpu or install a CUDA build of torch"
        )
    return model.to(target.torch_device())


def _cmd_select(args: argparse.Namespace) -> int:
    from dlopt.api.optimizer import InferenceOptimizer
    from dlopt.cli.demo import DEMO_FACTORY, build_demo_model, demo_workload
    from dlopt.plugins.discovery import load_providers
    from dlopt.reporting.progress import ProgressDisplay

    if args.demo == bool(args.model):
        raise ConfigurationError("give either MODULE:FACTORY or --demo")
    target = cli_target(args, must_exist=True)
    # Everything the user typed is checked before anything is built or allocated.
    preflight_select(args)
    warn_retired(args)
    if args.demo:
        if args.inputs or args.input or args.case:
            raise ConfigurationError(
                "--demo brings its own inputs: drop --inputs/--input/--case, or name your model"
            )
        model, workload = build_demo_model(), demo_workload()
        if races_batches(args):
            workload = workload.first_cases(1)  # its batch-1 request, at every batch size
        workload = attrs.evolve(workload, inputs="the demo's")
    else:
        model, workload = workload_from_args(args)
    workload = batched(workload, args)
    if args.grad_mode is not None:
        workload = attrs.evolve(workload, grad_mode=args.grad_mode)
    model = _on_target(model, target)
    isolate = isolated(args)
    measurement = (
        MeasurementPolicy(max_time_s=args.max_measure_time, seed=args.seed)
        if args.seed is not None
        else MeasurementPolicy(max_time_s=args.max_measure_time)
    )
    policy = OptimizationPolicy(
        objective=objective_of(args, str(_default(OptimizationPolicy, "objective"))),
        constraints=DeploymentConstraints(
            min_speedup=args.min_speedup,
            expected_calls=args.expected_calls,
            max_latency_ms=args.max_latency_ms,
            max_p99_latency_ms=args.max_p99_latency_ms,
        ),
        measurement=measurement,
        include=tuple(args.include) if args.include else None,
        exclude=tuple(args.exclude),
        plan_options=parse_plan_options(args.option),
        isolation="process" if isolate else "in_process",
        build_timeout_s=args.build_timeout,
        plan_cache_dir=cache_dir_of(args, required=False),
        reuse_cached_plan=not args.no_cache_reuse,
        on_unseen_signature=args.on_unseen_signature,
        time_budget_s=budget_of(args.time_budget),
        exhaustive=args.all_plans,
    )
    out = Output(plain=args.plain or None)
    progress = ProgressDisplay(plain=wants_plain(sys.stderr, args.plain))
    # What SDKs print or warn while they are imported, built and raced is shown once,
    # after the tables, never inside them.
    with captured_chatter() as chatter:
        try:
            if isolate:
                # Nothing of a plugin runs here before the race: the worker loads them.
                optimizer = InferenceOptimizer(
                    target=target,
                    policy=policy,
                    observers=[progress.dlopt_on_event],
                    artifact_dir=args.artifacts,
                )
                isolated_model = args.model or DEMO_FACTORY
                with progress:
                    decision = optimizer.select(isolated_model, workload)
            else:
                registry = load_providers()
                registry.plugin_manager.register(progress, name="dlopt.cli.progress")
                optimizer = InferenceOptimizer(
                    target=target, policy=policy, registry=registry, artifact_dir=args.artifacts
                )
                with progress:
                    decision = optimizer.select(model, workload)
        finally:
            progress.close()
    status = EXIT_OK
    try:
        out.line()
        print_report(decision.report, out)
        if decision.report.cache is not None:
            out.line(cache_line(decision.report.cache))
        if args.report:
            status = save_report_or_fallback(decision, args.report, out)
        if args.bundle:
            out.line(f"bundle: {decision.save_bundle(args.bundle)}")
        if args.demo:
            from dlopt.cli.demo import serve_one_request

            out.line(serve_one_request(decision, model, workload))
    finally:
        decision.close()
        show_chatter(chatter, verbose=args.verbose)
    return status


def save_report_or_fallback(decision: Any, destination: str, out: Output) -> int:
    """Write the report (atomically: a temporary file beside it, then a rename). When the
    destination cannot be written now (its directory vanished during the race), the
    finished race is not lost: the report goes to a fallback file, and the message says
    where; the exit code is then 1."""
    try:
        path = decision.save_report(destination)
    except OSError as exc:
        fallback = decision.save_report(report_fallback_path(destination))
        print(
            f"dlopt: error: cannot write the report to {destination}: "
            f"{why_unwritable(destination, exc)}; it was saved to {fallback} instead",
            file=sys.stderr,
        )
        return EXIT_FAILED
    out.line(f"report: {path}")
    return EXIT_OK


def why_unwritable(destination: str, error: OSError) -> str:
    """What stopped a write to ``destination`` that the preflight let through, in words:
    a directory on its path that a file replaced, one that became unwritable, else the
    system's own reason."""
    import errno

    target = Path(os.path.abspath(destination))
    for folder in target.parents:
        if not os.path.lexists(folder):
            continue
        if not folder.is_dir():
            return (
                f"{folder} is no longer a directory (a file took its place during the race), "
                "so the report cannot be written inside it"
            )
        if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and not os.access(
            folder, os.W_OK
        ):
            return f"{folder} can no longer be written ({error.strerror})"
        break
    return error.strerror or str(error)


def report_fallback_path(destination: str) -> Path:
    """Where a report goes when ``destination`` cannot be written: a new file in the
    working directory, else in the system temp directory, named after the destination."""
    import tempfile
    import time

    name = f"dlopt-report-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{Path(destination).name}"
    for directory in (Path.cwd(), Path(tempfile.gettempdir())):
        if os.access(directory, os.W_OK):
            return directory / name
    return Path(tempfile.gettempdir()) / name


def workload_from_args(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model and the inputs it races on: ``--inputs FILE``, random tensors of the
    ``--input``/``--case`` shapes, or the workload the factory returned.
    ``WorkloadProfile.inputs`` says which, so the report does too."""
    from dlopt.cli.input_files import describe_inputs_file, load_inputs
    from dlopt.settings.workload import WorkloadCase, WorkloadProfile

    specs = [parse_case_spec(c) for c in args.case]
    if args.input:
        specs.insert(0, ("input", *parse_input_spec(args.input), 1.0))
    if specs and args.inputs:
        raise ConfigurationError("give --inputs FILE or random shapes (--input/--case), not both")
    if specs:
        check_input_sizes(specs)
    entries = load_inputs(args.inputs) if args.inputs else None
    model, returned = load_factory(args.model)
    if entries is not None:
        kind = describe_inputs_file(args.inputs, len(entries))
        cases = [WorkloadCase(name, args=(tensor,)) for name, tensor in entries]
    elif specs:
        kind = "random tensors of the given shapes"
        cases = [
            WorkloadCase(name, args=(_random_input(shape, dtype, i),), weight=weight)
            for i, (name, shape, dtype, weight) in enumerate(specs)
        ]
    elif returned is not None:
        return model, attrs.evolve(returned, inputs=returned.inputs or "from the factory")
    else:
        raise ConfigurationError(
            "describe the inputs: --inputs FILE (.npz or .safetensors, one case per entry), "
            "--input 8x3x224x224 and/or --case NAME=SHAPE@WEIGHT, or return "
            "(model, WorkloadProfile) from the factory"
        )
    return model, WorkloadProfile(name=args.model, cases=cases, inputs=kind)


def add_select_command(sub: Any) -> None:
    """Register ``dlopt select`` on the subcommand parsers ``sub``; defaults come from the policies."""
    p = sub.add_parser(
        "select",
        help="race every eligible plan and pick one",
        description="Build, validate and race every eligible plan on the given inputs.",
    )
    p.add_argument(
        "model",
        nargs="?",
        help="MODULE:FACTORY returning an nn.Module or a (model, WorkloadProfile) pair "
        "(or use --demo)",
    )
    p.add_argument("--demo", action="store_true", help="use the built-in demo model and workload")
    p.add_argument(
        "--inputs",
        metavar="FILE",
        help="example inputs from a .npz or .safetensors file, one workload case per entry",
    )
    p.add_argument("--input", help="one input signature, e.g. 8x3x224x224[:float16]")
    p.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="NAME=SHAPE@WEIGHT",
        help="a workload case (repeatable), e.g. batch-1=1x3x224x224@70",
    )
    add_target_arguments(p, "race on")
    p.add_argument(
        "--objective",
        default=None,
        choices=OBJECTIVES,
        help=f"what the choice optimises (default: {_default(OptimizationPolicy, 'objective')})",
    )
    add_objective_arguments(p)
    p.add_argument(
        "--grad-mode",
        default=None,
        choices=[m.value for m in GradMode],
        help="the calling context plans are judged and served in: inference_mode (`with "
        "torch.inference_mode():`, the default unless the factory's workload says "
        "otherwise), no_grad, or enabled",
    )
    p.add_argument(
        "--on-unseen-signature",
        default=_default(OptimizationPolicy, "on_unseen_signature").value,
        choices=[u.value for u in UnseenSignature],
        help="what the decision (and a bundle loaded from it) does with a call whose shapes "
        "no case raced: fall back to eager fp32 (default) or raise",
    )
    p.add_argument(
        "--time-budget",
        type=parse_time_budget,
        default=None,
        metavar="SECONDS",
        help="wall seconds from the start to the decision, builds and race included: when "
        "they end, the best plan confirmed so far serves (default auto: "
        f"{AUTO_BUDGET_BASE_S:g} s plus {AUTO_BUDGET_PER_CALL:g} calls of the eager model on "
        "every case; 'none': no budget; not with --all-plans, which races every plan)",
    )
    p.add_argument(
        "--all-plans",
        action="store_true",
        help="build and race every plan, with no time budget: no plan is skipped on its "
        "prior (docs/selection.md, 'Decision time')",
    )
    p.add_argument(
        "--expected-calls", type=int, default=None, help="calls the deployment will serve"
    )
    _add_policy_option(
        p,
        "--min-speedup",
        DeploymentConstraints,
        "min_speedup",
        "bar a challenger must clear (default %(default)s)",
    )
    _add_policy_option(
        p,
        "--max-measure-time",
        MeasurementPolicy,
        "max_time_s",
        "measurement budget of the race (default: scaled to the model, "
        f"{_default(MeasurementPolicy, 'auto_budget_min_s'):g} to "
        f"{_default(MeasurementPolicy, 'auto_budget_max_s'):g} s)",
        metavar="SECONDS",
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the round shuffles (recorded)")
    p.add_argument(
        "--include", action="append", default=[], metavar="PLAN", help="race only these plans"
    )
    p.add_argument(
        "--exclude", action="append", default=[], metavar="PLAN", help="never race these plans"
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="PLAN.OPTION=VALUE",
        help="a plan option (repeatable); `dlopt providers --options PLAN` lists them",
    )
    p.add_argument("--report", help="write the JSON report here")
    p.add_argument("--bundle", help="write report, manifest and the selected plan's artifacts here")
    p.add_argument("--artifacts", help="directory for plan artifacts (default: a temporary dir)")
    add_isolation_choice(p, "race")
    _add_policy_option(
        p,
        "--build-timeout",
        OptimizationPolicy,
        "build_timeout_s",
        "isolated: a build (or first call) running longer is killed and its plan "
        "reported hung (default %(default)g)",
        metavar="SECONDS",
    )
    add_cache_argument(p)
    p.add_argument(
        "--no-cache-reuse",
        action="store_true",
        help="race even when the cache holds a record (the record is refreshed)",
    )
    add_verbose_argument(p)
    finish_command(p, _cmd_select)


def _default(cls: type, name: str) -> Any:
    """The default of attrs field ``name`` of ``cls``: one source for the API and the CLI."""
    return getattr(attrs.fields(cls), name).default


def _add_policy_option(
    p: argparse.ArgumentParser,
    flag: str,
    policy: type,
    field: str,
    help_text: str,
    metavar: str | None = None,
) -> None:
    """A number option whose default is the policy field's (:func:`_default`)."""
    p.add_argument(
        flag, type=float, default=_default(policy, field), metavar=metavar, help=help_text
    )


def budget_of(given: float | str | None) -> float | str | None:
    """The policy's ``time_budget_s`` for ``--time-budget`` (``None``: not given, auto)."""
    if given is None:
        return "auto"
    return None if given == "none" else given


def parse_time_budget(text: str) -> float | str:
    """``--time-budget``: seconds, ``auto`` or ``none`` (as text: the policy reads it
    through :func:`budget_of`)."""
    word = text.strip().lower()
    if word in ("auto", "none"):
        return "none" if word == "none" else "auto"
    try:
        seconds = float(word)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time budget: give seconds (e.g. 20), auto or none"
        ) from None
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIME_BUDGET_S):
        raise argparse.ArgumentTypeError(
            f"the time budget must be more than 0 seconds and at most {MAX_TIME_BUDGET_S:g} "
            f"(a week; none for no budget), got {text}"
        )
    return seconds
