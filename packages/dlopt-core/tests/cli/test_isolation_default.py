"""``dlopt select`` races in a supervised worker unless told otherwise: ``--in-process``
or ``DLOPT_ISOLATE=0`` (the flags win over the setting)."""

from __future__ import annotations

import pytest

import dlopt.api.optimizer as optimizer_module
from dlopt.cli import main
from dlopt.cli.app import build_parser
from dlopt.cli.common import isolated


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, True),
        ([], {"DLOPT_ISOLATE": "0"}, False),
        ([], {"DLOPT_ISOLATE": "off"}, False),
        ([], {"DLOPT_ISOLATE": "yes"}, True),
        (["--in-process"], {}, False),
        (["--in-process"], {"DLOPT_ISOLATE": "1"}, False),
        (["--isolate"], {"DLOPT_ISOLATE": "0"}, True),
    ],
)
def test_the_flags_then_the_setting_then_isolation(argv, env, expected):
    args = build_parser().parse_args(["select", "--demo", *argv])
    assert isolated(args, env) is expected


def test_isolate_and_in_process_together_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["select", "--demo", "--isolate", "--in-process"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


class Stop(Exception):
    """Raised where the race would start: the test has what it came for."""


def test_a_plain_select_asks_for_a_process_isolated_race(monkeypatch):
    monkeypatch.delenv("DLOPT_ISOLATE")
    seen = []

    def select(self, model, workload=None):
        seen.append((self.policy.isolation, model))
        raise Stop

    monkeypatch.setattr(optimizer_module.InferenceOptimizer, "select", select)
    with pytest.raises(Stop):
        main(["select", "--demo", "--max-measure-time", "1"])
    # Isolated, the worker rebuilds the model from its factory reference.
    assert seen == [("process", "dlopt.cli.demo:build_demo_model")]
