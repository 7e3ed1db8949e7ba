"""Property: random strings and numbers given to every CLI option that takes a path, a
number or a device are refused with exit 2 and a one-line message, never a traceback,
and before any model is imported or input allocated."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dlopt.cli import main

MODEL = "dlopt.testing.models:StructuredMLP"
SETTINGS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
#: Text of any kind a user might type, control characters and all (no NUL: the OS
#: refuses it in argv).
TEXT = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=40)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``dlopt argv`` must exit 2 with a message and no traceback; return the message."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error:" in err and "Traceback" not in err
    return err


def _under_a_file(root: Path, text: str) -> str:
    """A path built from ``text`` that cannot be created: its parent is a regular file."""
    blocker = root / "a-file"
    blocker.write_text("mine")
    return str(blocker / text.replace("/", "_").replace("\0", "_")) if text else ""


def _runnable_device(text: str) -> bool:
    """Whether ``text`` names a device this machine could race on (then it is no error)."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        return False
    if device.type == "cpu":
        return device.index in (None, 0)
    backend = getattr(torch, device.type, None)
    if backend is None or not getattr(backend, "is_available", lambda: False)():
        return False
    count = getattr(backend, "device_count", lambda: 0)()
    return (device.index or 0) < count


#: Values no float option takes: not positive, not finite, not a number.
BAD_FLOATS = st.one_of(
    st.floats(max_value=0),
    st.just(math.inf),
    st.just(math.nan),
    TEXT.filter(lambda t: not _is_number(t)),
)
#: Values no integer option takes: negative, past 64 bits, a float, not a number.
BAD_INTEGERS = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=2**63),
    st.floats(allow_nan=True).map(str),
    TEXT.filter(lambda t: not _is_number(t)),
)


def select_refuses(option: str, value: object, capsys: pytest.CaptureFixture[str]) -> None:
    """``dlopt select`` of the small model with ``option value`` exits 2 (see :func:`run`)."""
    run(["select", MODEL, "--case", "b=1x16", option, str(value)], capsys)


@SETTINGS
@given(option=st.sampled_from(["--report", "--bundle", "--artifacts", "--inputs"]), text=TEXT)
def test_select_paths(tmp_path, capsys, no_work, option, text):
    select_refuses(option, _under_a_file(tmp_path, text), capsys)


@SETTINGS
@given(option=st.sampled_from(["--min-speedup", "--max-measure-time"]), value=BAD_FLOATS)
def test_select_float_options(tmp_path, capsys, no_work, option, value):
    select_refuses(option, value, capsys)


@SETTINGS
@given(option=st.sampled_from(["--expected-calls", "--seed"]), value=BAD_INTEGERS)
def test_select_integer_options(tmp_path, capsys, no_work, option, value):
    select_refuses(option, value, capsys)


@SETTINGS
@given(
    option=st.sampled_from(["--input", "--case"]),
    dims=st.lists(st.integers(min_value=0, max_value=10**30), min_size=1, max_size=4).filter(
        lambda d: 0 in d or math.prod(d) > 2**40
    ),
    junk=TEXT,
)
def test_select_shapes(tmp_path, capsys, no_work, option, dims, junk):
    shape = "x".join(map(str, dims))
    for spec in (shape, f"{shape}{junk}:" if junk else "1x"):
        value = spec if option == "--input" else f"c={spec}@1"
        run(["select", MODEL, option, value], capsys)


@SETTINGS
@given(
    command=st.sampled_from(["select", "providers", "inspect"]),
    option=st.sampled_from(["--device", "--host"]),
    text=st.one_of(TEXT, st.sampled_from(["meta", "cpu:1", "cuda:64", "mps:3", "xpu:9"])),
)
def test_devices(tmp_path, capsys, no_work, command, option, text):
    assume(not _runnable_device(text))
    # `providers`/`inspect` may name a device this machine lacks (to say why plans are
    # out); what torch cannot parse at all, and meta, are refused everywhere.
    if command != "select":
        assume(not _parses(text) or text.startswith("meta"))
    argv = (
        [command, "--device", "cpu", "--host", text]
        if option == "--host"
        else [command, "--device", text]
    )
    if command == "select":
        argv[1:1] = [MODEL, "--case", "b=1x16"]
    run(argv, capsys)


@SETTINGS
@given(text=TEXT, which=st.sampled_from(["report", "report-html", "export", "export-dir"]))
def test_report_and_export_paths(tmp_path, capsys, which, text, report_path):
    bad = _under_a_file(tmp_path, text)
    argv = {
        "report": ["report", bad],
        "report-html": ["report", str(report_path), "--html", bad],
        "export": ["export", bad, "-o", str(tmp_path / "out")],
        "export-dir": ["export", str(report_path), "-o", bad],
    }[which]
    run(argv, capsys)
    assert not (tmp_path / "out").exists()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parses(text: str) -> bool:
    import torch

    try:
        torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        return False
    return True
