"""On a CUDA machine, ``dlopt providers --json`` and ``dlopt inspect --json`` print one
JSON document on stdout: what SDKs print while they are probed (ONNX Runtime's "EP Error
... Falling back", torch_tensorrt's import errors) is captured, not mixed into it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason=f"torch {torch.__version__} sees no CUDA device"
    ),
]


@pytest.mark.parametrize("command", ["providers", "inspect"])
def test_json_output_is_json_only(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dlopt", command, "--device", "cuda", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)  # raises on anything printed before or after
    assert isinstance(data, dict)
