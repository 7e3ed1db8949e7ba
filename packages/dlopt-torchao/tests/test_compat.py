"""The torch/torchao pairing table, from versions alone."""

from __future__ import annotations

import pytest

from dlopt_torchao.compat import Compatibility, check_torch_pairing, recommended_torchao


@pytest.mark.parametrize(
    ("torchao", "torch", "status"),
    [
        ("0.18.0", "2.13.0+cpu", Compatibility.SUPPORTED),  # stable ABI: every torch >= 2.11
        ("0.17.0", "2.11.0", Compatibility.SUPPORTED),
        ("0.16.0", "2.10.0+cu128", Compatibility.SUPPORTED),
        ("0.13.0", "2.8.0", Compatibility.SUPPORTED),
        ("0.12.0", "2.6.0", Compatibility.SUPPORTED),
        ("0.16.0", "2.9.1", Compatibility.PYTHON_API_ONLY),
        ("0.18.0", "2.10.0", Compatibility.PYTHON_API_ONLY),
        ("0.18.0", "2.8.0", Compatibility.UNSUPPORTED),
        ("0.13.0", "2.5.1", Compatibility.UNSUPPORTED),
        ("0.16.0", "2.12.0", Compatibility.UNTESTED),  # newer than its published range
        ("0.11.0", "2.7.0", Compatibility.UNTESTED),  # not in the table
    ],
)
def test_pairing_status(torchao: str, torch: str, status: Compatibility) -> None:
    verdict = check_torch_pairing(torchao, torch)
    assert verdict.status is status, verdict.message
    assert verdict.usable is (status is not Compatibility.UNSUPPORTED)
    assert torchao in verdict.message


def test_unsupported_pair_names_a_release_that_fits() -> None:
    verdict = check_torch_pairing("0.18.0", "2.8.0")
    assert "needs torch >= 2.9" in verdict.message
    assert verdict.fix == 'pip install "torchao==0.13.*"'


def test_python_only_pair_points_at_the_release_built_for_that_torch() -> None:
    verdict = check_torch_pairing("0.16.0", "2.9.1")
    assert "built for torch 2.10" in verdict.message
    assert verdict.fix == 'pip install "torchao==0.15.*"'


@pytest.mark.parametrize(
    ("torch", "expected"),
    [
        ("2.13.0", "torchao==0.18.*"),
        ("2.10.0", "torchao==0.16.*"),
        ("2.7.1", "torchao==0.12.*"),
        ("2.4.0", None),  # older than every release in the table
    ],
)
def test_recommended_torchao(torch: str, expected: str | None) -> None:
    assert recommended_torchao(torch) == expected
