"""``dlopt select`` and ``dlopt report`` from the command line."""

from __future__ import annotations

import json

import pytest

from dlopt.cli import main
from dlopt.cli.cmd_select import parse_case_spec, parse_input_spec
from dlopt.errors import WorkloadError


def test_select_races_writes_a_strict_report_and_report_reprints_it(
    tmp_path, capsys, monkeypatch, select_argv
):
    monkeypatch.setenv("DLOPT_DISABLE_PLUGIN_AUTOLOAD", "1")
    report = tmp_path / "report.json"
    extra = ["--seed", "3", "--report", str(report), "--bundle", str(tmp_path / "bundle")]
    code = main(select_argv("b1=1x16@70", "b4=4x16@30", extra=extra))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "selected: eager_fp32" in captured.out
    assert "reason:" in captured.out
    # channels-last needs image inputs: not applicable, with the reason; the race went on.
    assert (
        "native_channels_last" in captured.out
        and "not applicable: channels-last needs" in captured.out
    )
    assert "race_started" in captured.err  # progress through the event hook
    data = json.loads(report.read_text(), parse_constant=lambda c: pytest.fail(c))
    assert data["measurement"]["seed"] == 3
    assert [c["name"] for c in data["workload"]["cases"]] == ["b1", "b4"]
    assert (tmp_path / "bundle" / "manifest.json").exists()

    assert main(["report", str(report)]) == 0
    again = capsys.readouterr().out
    assert "selected: eager_fp32" in again and "native_channels_last" in again


def test_select_usage_errors_exit_2(capsys):
    assert main(["select"]) == 2
    assert "MODULE:FACTORY or --demo" in capsys.readouterr().err
    assert main(["select", "no_such_module_xyz:build", "--input", "1x3"]) == 2
    assert "cannot import 'no_such_module_xyz'" in capsys.readouterr().err
    assert main(["report", "/nonexistent/report.json"]) == 2


def test_report_refuses_a_file_that_is_not_a_report(tmp_path, capsys):
    path = tmp_path / "x.json"
    path.write_text('{"schema_version": 99}')
    assert main(["report", str(path)]) == 2
    assert "schema_version 99" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "shape", "dtype"),
    [
        ("8x3x224x224", (8, 3, 224, 224), "float32"),
        ("1x16:fp16", (1, 16), "float16"),
        ("4:int64", (4,), "int64"),
    ],
)
def test_input_specs(spec, shape, dtype):
    assert parse_input_spec(spec) == (shape, dtype)


@pytest.mark.parametrize("spec", ["8x", "x3", "8*3", "8x3:complex", "01:"])
def test_bad_input_specs_say_how_to_write_them(spec):
    with pytest.raises(WorkloadError, match=r"8x3x224x224|dtype"):
        parse_input_spec(spec)


def test_case_specs():
    assert parse_case_spec("b8=8x3@25") == ("b8", (8, 3), "float32", 25.0)
    with pytest.raises(WorkloadError, match="NAME=SHAPE"):
        parse_case_spec("8x3@25")
    with pytest.raises(WorkloadError, match="bad weight"):
        parse_case_spec("b=8x3@lots")


def test_report_that_does_not_match_the_schema_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text('{"schema_version": 2, "candidates": 3}')
    assert main(["report", str(path)]) == 2
    assert "is not a dlopt report" in capsys.readouterr().err


def test_cuda_without_a_cuda_device_says_so(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert (
        main(
            ["select", "dlopt.testing.models:StructuredMLP", "--input", "1x16", "--device", "cuda"]
        )
        == 2
    )
    assert "no CUDA device" in capsys.readouterr().err
    assert main(["inspect", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_select_moves_the_model_it_built_to_the_target_device(monkeypatch):
    import torch

    from dlopt.api.optimizer import InferenceOptimizer
    from dlopt.testing.models import StructuredMLP

    moved_to: list[str] = []
    seen: list[str] = []

    def fake_to(self, device, *args, **kwargs):
        moved_to.append(str(device))
        return self

    def fake_select(self, model, workload):
        seen.append(self.target.device)
        raise KeyboardInterrupt  # stop before anything runs on the (absent) device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # the index is checked first
    monkeypatch.setattr(StructuredMLP, "to", fake_to)
    monkeypatch.setattr(InferenceOptimizer, "select", fake_select)
    code = main(
        ["select", "dlopt.testing.models:StructuredMLP", "--input", "1x16", "--device", "cuda:0"]
    )
    assert code == 130 and seen == ["cuda:0"]
    assert moved_to == ["cuda:0"]
