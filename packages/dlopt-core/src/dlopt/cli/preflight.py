"""Check before work: everything a command was told is checked before anything is built.

Every path (inputs, report, bundle, artifacts, HTML page, export directory), the device,
the ``DLOPT_*`` environment settings and every workload number is checked here, before
the first import of a model or build of a plan, and each problem is one
:class:`~dlopt.errors.ConfigurationError` that says what was wrong and how to fix it
(exit 2). An output that would overwrite one of the command's own inputs is refused.
Files dlopt reads must be regular files (no FIFO, device or socket, which could block or
never end). docs/checks.md lists the checks.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from dlopt.errors import ConfigurationError, WorkloadError
from dlopt.platform.sizes import MAX_ELEMENTS, memory_fault, shape_fault, weights_overflow
from dlopt.settings.target import ExecutionTarget

#: Boolean ``DLOPT_*`` switches and the words they take.
BOOLEAN_SWITCHES = ("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "DLOPT_STRICT_PLUGINS", "DLOPT_ISOLATE")
_KIND_NAMES = {"cuda": "CUDA", "xpu": "XPU", "mps": "MPS"}
_SWITCH_WORDS = ("", "0", "1", "false", "true", "no", "yes", "off", "on")


# -- the environment --------------------------------------------------------------------
def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse ``DLOPT_*`` settings out of range (``DLOPT_PROBE_TIMEOUT_S=1e10``) or not
    understood (``DLOPT_STRICT_PLUGINS=maybe``), naming the variable and what it takes."""
    from dlopt.settings.policy import default_probe_timeout_s

    env = os.environ if environ is None else environ
    default_probe_timeout_s(env)
    for name in BOOLEAN_SWITCHES:
        value = env.get(name, "").strip().lower()
        if value not in _SWITCH_WORDS:
            raise ConfigurationError(
                f"{name}={env[name]!r} is not understood: set it to 1/true/yes/on or "
                "0/false/no/off, or unset it"
            )


# -- the device ---------------------------------------------------------------------------
def check_device(
    device: str, host: str | None = None, *, must_exist: bool = True
) -> ExecutionTarget:
    """The target of ``--device``/``--host``, refused unless torch can run plans there:
    a string torch cannot parse, ``meta`` (tensors without data) and, with
    ``must_exist`` (a race), an index past the devices this machine has or a device type
    whose backend is not available (``dlopt providers --device cuda`` on a CPU machine
    still runs, to say why each plan is unavailable)."""
    try:
        target = ExecutionTarget(device, host=host)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"--device {device!r}: {exc}") from None
    target.check_known()
    import torch

    places = [("--host", host)] if host is not None else [("--device", target.device)]
    for option, where in places:
        try:
            parsed = torch.device(where)
        except (RuntimeError, ValueError) as exc:
            raise ConfigurationError(
                f"{option} {where!r} is not a device torch understands ({exc}); write a type "
                "and an optional index, e.g. cpu, cuda or cuda:0"
            ) from None
        if parsed.type == "meta":
            raise ConfigurationError(
                f"{option} {where!r}: meta tensors hold no data, so no plan can run or be "
                "timed on them; use cpu or a GPU such as cuda:0"
            )
        if must_exist:
            _check_device_exists(option, where, parsed)
    return target


def _check_device_exists(option: str, text: str, device: object) -> None:
    import torch

    kind = getattr(device, "type", "cpu")
    index = getattr(device, "index", None)
    if kind == "cpu":
        if index not in (None, 0):
            raise ConfigurationError(f"{option} {text!r}: the CPU has no index {index}; use cpu")
        return
    backend = getattr(torch, kind, None)
    is_available = getattr(backend, "is_available", None)
    count_devices = getattr(backend, "device_count", None)
    if callable(is_available) and not is_available():
        raise ConfigurationError(
            f"{option} {text!r}: torch {torch.__version__} sees no {_KIND_NAMES.get(kind, kind)} "
            "device here; use "
            f"--device cpu or install a torch build with {kind} support"
        )
    if index is not None and callable(count_devices):
        count = int(count_devices())
        if index >= count:
            raise ConfigurationError(
                f"{option} {text!r}: this machine has {count} {kind} device"
                f"{'s' if count != 1 else ''} (indices 0 to {count - 1}); choose one of them"
            )


# -- numbers ------------------------------------------------------------------------------
def check_shape(shape: Sequence[int], spec: str) -> None:
    """Refuse a shape with a zero dimension (a batch of size 0) or one whose dimensions
    or element count overflow what torch can index."""
    fault = shape_fault(shape)
    if fault is not None:
        raise WorkloadError(f"shape {spec!r} {fault}")


def check_weight(weight: float, spec: str) -> None:
    """A case weight is a finite share of traffic > 0."""
    if not (math.isfinite(weight) and weight > 0):
        raise WorkloadError(
            f"bad weight {weight!r} in --case {spec!r}: give a finite number > 0, its share "
            "of traffic (e.g. @70)"
        )


def check_weights(weights: Iterable[float]) -> None:
    """Weights that overflow when summed are refused now, not after every plan is built."""
    values = list(weights)
    if values and weights_overflow(values):
        raise WorkloadError(
            f"the --case weights overflow when summed (largest {max(values):g}); weights are "
            "relative shares of traffic: scale them down, e.g. to percentages"
        )


def check_positive(option: str, value: float | int | None, *, example: str) -> None:
    """``value`` (when given) is a finite number > 0."""
    if value is None:
        return
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{option} {value!r}: give a finite number > 0, e.g. {example}")


def check_count(option: str, value: int | None, *, maximum: int = MAX_ELEMENTS) -> None:
    """``value`` (when given) is an integer from 0 to ``maximum``."""
    if value is not None and not 0 <= value <= maximum:
        raise ConfigurationError(f"{option} {value}: give an integer from 0 to {maximum}")


def check_input_sizes(
    specs: list[tuple[str, tuple[int, ...], str, float]], available: int | None = None
) -> None:
    """Refuse inputs that cannot fit in memory before any is allocated.

    Python integers do not overflow, so the byte count is exact however large the shape;
    the cap is the memory available now
    (:func:`dlopt.platform.sizes.available_memory_bytes`).
    """
    fault = memory_fault([(name, shape, dtype) for name, shape, dtype, _ in specs], available)
    if fault is not None:
        raise WorkloadError(fault)


# -- paths --------------------------------------------------------------------------------
def check_input_path(option: str, path_text: str, *, what: str) -> Path:
    """A file the command reads: it must exist and be a regular file."""
    from dlopt.platform.fileio import check_regular_file

    if not path_text:
        raise ConfigurationError(f"{option} is empty: give the path of {what}")
    path = Path(path_text)
    try:
        check_regular_file(path)
    except FileNotFoundError:
        raise ConfigurationError(
            f"{option} {path}: no such file; give the path of {what}"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"{option} {path}: {exc.strerror or exc}; give the path of {what}"
        ) from None
    return path


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file (hard links and symlinks included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _inside(path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(directory))


def check_output_file(
    option: str, path_text: str | None, *, what: str, inputs: Sequence[tuple[str, str]] = ()
) -> None:
    """A file the command writes: not empty, writable (a regular file replaced whole or a
    new one in a creatable directory), and never one of ``inputs`` (``(option, path)``)."""
    from dlopt.platform.fileio import check_writable_file

    if path_text is None:
        return
    if not path_text:
        raise ConfigurationError(
            f"{option} is empty: give a file path for {what} (e.g. {option} report.json), or "
            f"leave {option} out"
        )
    for input_option, input_path in inputs:
        if input_path and same_file(path_text, input_path):
            raise ConfigurationError(
                f"{option} {path_text} is the same file as {input_option} {input_path}: writing "
                f"{what} would destroy it; give another path for {option}"
            )
    _usage_error(option, path_text, check_writable_file, what)


def check_output_dir(
    option: str,
    path_text: str | None,
    *,
    what: str,
    inputs: Sequence[tuple[str, str]] = (),
    replaced_whole: bool = False,
    written_names: Iterable[str] = (),
) -> None:
    """A directory the command writes into: not empty, not a file, creatable and writable.
    An input inside it is refused when the directory is ``replaced_whole`` (a bundle) or
    when the input has one of the ``written_names`` the command writes there."""
    from dlopt.platform.fileio import check_can_create_in

    if path_text is None:
        return
    if not path_text:
        raise ConfigurationError(f"{option} is empty: give a directory for {what}")
    path = Path(path_text)
    if os.path.lexists(path) and not path.is_dir():
        raise ConfigurationError(
            f"{option} {path} exists and is not a directory: give a directory for {what}"
        )
    written = set(written_names)
    for input_option, input_path in inputs:
        if not input_path or not _inside(input_path, path):
            continue
        clash = replaced_whole or (
            os.path.dirname(os.path.realpath(input_path)) == os.path.realpath(path)
            and os.path.basename(input_path) in written
        )
        if clash:
            raise ConfigurationError(
                f"{input_option} {input_path} lies inside {option} {path}, where {what} is "
                f"written: it would be overwritten; give {option} another directory"
            )
    _usage_error(option, path_text, check_can_create_in, what)


def _usage_error(option: str, path_text: str, check: Callable[..., object], what: str) -> None:
    """Run a :mod:`dlopt.platform.fileio` check; its ``ValueError`` names the option."""
    try:
        check(path_text, purpose=what)
    except ValueError as exc:
        raise ConfigurationError(f"{option} {path_text}: {exc}") from None
