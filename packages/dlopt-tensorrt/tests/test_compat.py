"""Metadata-only compatibility rules for Torch-TensorRT."""

from __future__ import annotations

import pytest

from dlopt_tensorrt.compat import (
    check_torch_pairing,
    cuda_index_url,
    min_compute_capability,
    torch_requirement,
)


def test_torch_requirement_is_read_from_requires_dist() -> None:
    requires = [
        "packaging>=23",
        'torch>=2.14.0.dev; extra == "nightly"',  # only for an extra: ignored
        "torch<2.11.0,>=2.10.0",
        "tensorrt-cu12<10.15.0,>=10.14.1",
    ]
    assert torch_requirement(requires) == "<2.11.0,>=2.10.0"
    assert torch_requirement(["numpy"]) is None
    assert torch_requirement(None) is None


def test_pairing_from_metadata() -> None:
    requires = ["torch<2.11.0,>=2.10.0.dev"]
    ok = check_torch_pairing("2.10.0", "2.10.1+cu128", requires)
    assert ok.ok and ok.source == "metadata"
    bad = check_torch_pairing("2.10.0", "2.13.0+cu126", requires)
    assert not bad.ok
    assert bad.message == (
        "torch-tensorrt 2.10.0 requires torch<2.11.0,>=2.10.0.dev (from its metadata), "
        "but torch 2.13.0+cu126 is installed"
    )


def test_pairing_falls_back_to_the_minor_version_rule() -> None:
    assert check_torch_pairing("2.13.0", "2.13.1", None).ok
    bad = check_torch_pairing("2.12.0", "2.13.0", ["packaging"])
    assert not bad.ok and bad.source == "version rule"
    assert "pairs with torch==2.12.*" in bad.message


@pytest.mark.parametrize(
    ("trt", "expected"),
    [
        ("10.14.1.48", (7, 5)),
        ("10.0.1", (7, 5)),
        ("11.0.0", (7, 5)),
        ("8.6.1", (5, 0)),
        (None, None),
    ],
)
def test_min_compute_capability(trt: str | None, expected: tuple[int, int] | None) -> None:
    assert min_compute_capability(trt) == expected


def test_cuda_index_url_follows_torch_cuda() -> None:
    assert cuda_index_url("12.6") == "https://download.pytorch.org/whl/cu126"
    assert cuda_index_url("13.0") == "https://download.pytorch.org/whl/cu130"
    assert cuda_index_url(None) == "https://download.pytorch.org/whl/cuXXX"
