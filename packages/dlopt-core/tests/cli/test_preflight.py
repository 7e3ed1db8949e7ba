"""Check before work: every path, device, environment setting and workload number a
command is given is refused, with a message saying what to do, before anything is built,
and nothing the user owns is written, changed or left behind (docs/checks.md)."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dlopt.cli.cmd_select as cli_select
from dlopt.cli import main
from dlopt.cli.preflight import check_device, check_environment
from dlopt.errors import ConfigurationError

MODEL = "dlopt.testing.models:StructuredMLP"


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (``None`` for what is not a regular file)."""
    return {
        str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
        for path in sorted(root.rglob("*"))
    }


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], root: Path) -> str:
    """Run ``dlopt argv``; assert exit 2, no traceback and ``root`` unchanged; the message."""
    before = snapshot(root)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dlopt: error: ") and "Traceback" not in err
    assert snapshot(root) == before
    return err


# -- outputs that would overwrite an input ----------------------------------------------
def test_select_refuses_a_report_over_its_own_inputs(tmp_path, capsys, no_work):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, b1=np.ones((1, 16), dtype=np.float32))
    err = refused(
        ["select", MODEL, "--inputs", str(inputs), "--report", str(inputs)], capsys, tmp_path
    )
    assert f"--report {inputs} is the same file as --inputs {inputs}" in err
    assert "give another path for --report" in err


def test_select_refuses_a_report_that_is_a_hard_link_to_its_inputs(tmp_path, capsys, no_work):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, b1=np.ones((1, 16), dtype=np.float32))
    os.link(inputs, tmp_path / "linked.json")
    err = refused(
        ["select", MODEL, "--inputs", str(inputs), "--report", str(tmp_path / "linked.json")],
        capsys,
        tmp_path,
    )
    assert "is the same file as --inputs" in err


def test_select_refuses_a_bundle_that_would_swallow_its_inputs(tmp_path, capsys, no_work):
    (tmp_path / "b").mkdir()
    inputs = tmp_path / "b" / "in.npz"
    np.savez(inputs, b1=np.ones((1, 16), dtype=np.float32))
    err = refused(
        ["select", MODEL, "--inputs", str(inputs), "--bundle", str(tmp_path / "b")],
        capsys,
        tmp_path,
    )
    assert "lies inside --bundle" in err and "would be overwritten" in err


def test_report_html_over_the_report_is_refused(tmp_path, capsys, report_path):
    report = tmp_path / "r.json"
    report.write_bytes(report_path.read_bytes())
    err = refused(["report", str(report), "--html", str(report)], capsys, tmp_path)
    assert f"--html {report} is the same file as the report {report}" in err


def test_export_into_the_directory_of_a_report_named_like_an_export_file_is_refused(
    tmp_path, capsys, report_path
):
    report = tmp_path / "provenance.json"
    report.write_bytes(report_path.read_bytes())
    err = refused(["export", str(report), "-o", str(tmp_path)], capsys, tmp_path)
    assert f"REPORT {report} lies inside --output-dir {tmp_path}" in err


# -- bad output paths -------------------------------------------------------------------
def test_an_empty_report_path_is_an_error(tmp_path, capsys, no_work):
    err = refused(["select", MODEL, "--case", "b=1x16", "--report", ""], capsys, tmp_path)
    assert "--report is empty: give a file path for the report" in err


@pytest.mark.parametrize("kind", ["file", "under-a-file"])
def test_artifacts_that_cannot_be_a_directory_are_refused_before_the_race(
    tmp_path, capsys, no_work, kind
):
    (tmp_path / "f").write_text("mine")
    artifacts = tmp_path / "f" if kind == "file" else tmp_path / "f" / "sub"
    err = refused(
        ["select", MODEL, "--case", "b=1x16", "--artifacts", str(artifacts)], capsys, tmp_path
    )
    assert f"--artifacts {artifacts}" in err
    assert ("is not a directory" in err) or ("exists and is not a directory" in err)


# -- the plan cache directory --------------------------------------------------------------
def _cache_dir(tmp_path: Path, kind: str) -> str:
    (tmp_path / "f").write_text("mine")
    return {
        "file": str(tmp_path / "f"),
        "under-a-file": str(tmp_path / "f" / "cache"),
        "proc": "/proc/dlopt-cache",
        "empty": "",
    }[kind]


CACHE_DIR_PROBLEMS = {
    "file": "is a regular file, not a directory",
    "under-a-file": "is not a directory, so",
    "proc": "cannot write plan cache records: /proc is not writable",
    "empty": "is empty: give the plan cache directory",
}


@pytest.mark.parametrize("kind", list(CACHE_DIR_PROBLEMS))
@pytest.mark.parametrize("where", ["option", "environment"])
def test_a_cache_dir_that_cannot_hold_records_is_refused_before_the_race(
    tmp_path, capsys, no_work, monkeypatch, kind, where
):
    cache_dir = _cache_dir(tmp_path, kind)
    if where == "environment":
        if kind == "empty":
            pytest.skip("an empty DLOPT_CACHE_DIR means no cache, as an unset one does")
        monkeypatch.setenv("DLOPT_CACHE_DIR", cache_dir)
        extra = []
        named = f"$DLOPT_CACHE_DIR {cache_dir}"
    else:
        monkeypatch.delenv("DLOPT_CACHE_DIR", raising=False)
        extra = ["--cache-dir", cache_dir]
        named = "--cache-dir" if kind == "empty" else f"--cache-dir {cache_dir}"
    err = refused(["select", MODEL, "--case", "b=1x16", *extra], capsys, tmp_path)
    assert named in err and CACHE_DIR_PROBLEMS[kind] in err, err
    assert (tmp_path / "f").read_text() == "mine"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any directory")
def test_a_cache_dir_that_cannot_be_written_is_refused_before_the_race(tmp_path, capsys, no_work):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        err = refused(
            ["select", MODEL, "--case", "b=1x16", "--cache-dir", str(locked)], capsys, tmp_path
        )
    finally:
        locked.chmod(0o700)
    assert f"--cache-dir {locked}" in err and "is not writable" in err


@pytest.mark.parametrize(
    "action", [["list"], ["show", "abcdef"], ["prune", "--older-than", "1d"], ["clear"]]
)
def test_dlopt_cache_names_a_cache_dir_that_is_a_file(tmp_path, capsys, action):
    (tmp_path / "f").write_text("mine")
    assert main(["cache", *action, "--cache-dir", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert f"--cache-dir {tmp_path / 'f'} is a regular file, not a directory" in err
    assert (tmp_path / "f").read_text() == "mine"


def test_dlopt_cache_list_says_when_the_cache_does_not_exist_yet(tmp_path, capsys):
    assert main(["cache", "list", "--cache-dir", str(tmp_path / "none")]) == 0
    assert f"{tmp_path / 'none'} does not exist yet" in capsys.readouterr().out
    assert not (tmp_path / "none").exists()


# -- files that are not regular files ---------------------------------------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_without_blocking_everywhere_dlopt_reads(tmp_path, capsys, no_work):
    from dlopt import load_bundle

    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    err = refused(["select", MODEL, "--inputs", str(fifo)], capsys, tmp_path)
    assert "it is a FIFO (named pipe), not a regular file" in err
    err = refused(["report", str(fifo)], capsys, tmp_path)
    assert "FIFO" in err
    err = refused(["export", str(fifo), "-o", str(tmp_path / "out")], capsys, tmp_path)
    assert "FIFO" in err
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    os.mkfifo(bundle / "manifest.json")
    with pytest.raises(Exception, match="FIFO"):
        load_bundle(bundle)


# -- devices and the environment --------------------------------------------------------
@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("meta", "meta tensors hold no data"),
        ("cpu:3", "the CPU has no index 3"),
        ("cuda:99", "cuda"),
        ("not a device!", "--device"),
    ],
)
def test_devices_torch_rejects_are_refused_before_work(tmp_path, capsys, no_work, device, message):
    err = refused(["select", MODEL, "--case", "b=1x16", "--device", device], capsys, tmp_path)
    assert message in err


def test_a_device_index_past_the_devices_present_names_how_many_there_are(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigurationError, match=r"has 2 cuda devices \(indices 0 to 1\)"):
        check_device("cuda:5")
    assert check_device("cuda:1").device == "cuda:1"
    # `dlopt providers` may still name a device this machine lacks, to say why plans are out.
    assert check_device("cuda:5", must_exist=False).device == "cuda:5"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("DLOPT_PROBE_TIMEOUT_S", "1e10", "DLOPT_PROBE_TIMEOUT_S must be a number of seconds > 0"),
        ("DLOPT_PROBE_TIMEOUT_S", "-1", "unset it for the default"),
        ("DLOPT_STRICT_PLUGINS", "maybe", "DLOPT_STRICT_PLUGINS='maybe' is not understood"),
        ("DLOPT_ISOLATE", "sometimes", "DLOPT_ISOLATE='sometimes' is not understood"),
    ],
)
def test_environment_settings_out_of_range_are_refused(
    tmp_path, capsys, monkeypatch, no_work, name, value, message
):
    monkeypatch.setenv(name, value)
    for argv in (["providers"], ["select", MODEL, "--case", "b=1x16"]):
        assert message in refused(argv, capsys, tmp_path)
    check_environment({name: ""})  # unset or empty: the default


# -- workload numbers -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--case", f"b={'9' * 25}x0"], "a dimension of 0 (a batch of size 0)"),
        (["--case", "b=0x16"], "a batch of size 0"),
        (["--input", f"{2**63}x1"], "more elements than torch can index"),
        (["--case", f"b={2**40}x{2**40}"], "more elements than torch can index"),
        (["--case", "a=1x16@1e308", "--case", "b=1x16@1e308"], "weights overflow when summed"),
        (["--case", "b=1x16@inf"], "give a finite number > 0"),
        (["--case", "b=1x16@nan"], "give a finite number > 0"),
        (["--case", "b=1x16", "--min-speedup", "nan"], "--min-speedup nan"),
        (["--case", "b=1x16", "--max-measure-time", "-1"], "--max-measure-time -1"),
        (["--case", "b=1x16", "--expected-calls", "-5"], "--expected-calls -5"),
        (["--case", "b=1x16", "--seed", str(2**40)], "--seed"),
    ],
)
def test_workload_numbers_are_refused_before_work(tmp_path, capsys, no_work, args, message):
    assert message in refused(["select", MODEL, *args], capsys, tmp_path)


# -- .npz headers -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "payload", "message"),
    [
        ("(1000000000000000,)", b"\0" * 64, "claims shape (1000000000000000,)"),
        ("(4, 16)", b"\0" * 100, "truncated or corrupt"),
    ],
)
def test_an_npz_member_whose_header_lies_is_refused_without_allocating(
    tmp_path, capsys, monkeypatch, forge_npz, shape, payload, message
):
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    inputs = tmp_path / "in.npz"
    forge_npz(inputs, shape, payload)
    err = refused(["select", MODEL, "--inputs", str(inputs)], capsys, tmp_path)
    assert message in err and "pickle" not in err


# -- the factory's import ---------------------------------------------------------------
def test_a_stray_sdk_named_file_in_the_working_directory_does_not_shadow_the_sdk(
    tmp_path, capsys, monkeypatch
):
    """``json.py`` in the working directory stands for a stray ``onnxruntime.py``: the
    factory's module is found there, the installed module of that name is not replaced."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    monkeypatch.delitem(sys.modules, "user_factory_here", raising=False)
    (tmp_path / "textwrap.py").write_text("raise SystemExit('the stray file was imported')\n")
    (tmp_path / "user_factory_here.py").write_text(
        textwrap.dedent(
            """
            import textwrap  # resolved against the installed library, not the stray file
            from dlopt.testing.models import StructuredMLP

            def build():
                return StructuredMLP()
            """
        )
    )
    monkeypatch.delitem(sys.modules, "textwrap")
    model, workload = cli_select.load_factory("user_factory_here:build")
    assert type(model).__name__ == "StructuredMLP" and workload is None
    assert sys.path[-1] == str(tmp_path) and "" not in sys.path
    assert sys.modules["textwrap"].__file__ != str(tmp_path / "textwrap.py")


# -- nothing lost: the report ------------------------------------------------------------
def test_a_report_whose_directory_vanished_goes_to_a_stated_fallback(tmp_path, capsys, monkeypatch):
    import torch

    from dlopt.cli.console import Output
    from dlopt.testing.fake_race import FakeRace
    from dlopt.testing.models import StructuredMLP

    race = FakeRace()
    decision = race.optimizer(race.fake("eager_fp32", 2e-3)).select_signature(
        StructuredMLP(), torch.randn(2, 16)
    )
    monkeypatch.chdir(tmp_path)
    # The report's directory was removed during the race and a file took its name, so
    # the destination can no longer be created.
    gone = tmp_path / "gone"
    gone.write_text("mine")
    try:
        code = cli_select.save_report_or_fallback(decision, str(gone / "r.json"), Output())
    finally:
        decision.close()
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot write the report to {gone / 'r.json'}: {gone} is no longer a directory" in err
    assert "a file took its place during the race" in err and "File exists" not in err
    fallback = Path(err.rpartition("saved to ")[2].split(" instead")[0])
    assert fallback.parent == tmp_path and fallback.name.endswith("r.json")
    assert '"selected_plan": "eager_fp32"' in fallback.read_text()
    assert gone.read_text() == "mine"


# -- the same checks from Python -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["file", "under-a-file", "empty"])
def test_the_optimizer_refuses_an_artifact_dir_it_cannot_use(tmp_path, kind):
    from dlopt import InferenceOptimizer

    (tmp_path / "f").write_text("mine")
    artifact_dir = {"file": tmp_path / "f", "under-a-file": tmp_path / "f" / "sub", "empty": ""}[
        kind
    ]
    before = snapshot(tmp_path)
    with pytest.raises(ConfigurationError, match="artifact_dir"):
        InferenceOptimizer("cpu", artifact_dir=artifact_dir)
    assert snapshot(tmp_path) == before
