"""CPU sessions do not spin idle intra-op threads unless asked to (no SDK import needed)."""

from __future__ import annotations

from dlopt_onnxruntime.provider import SPINNING_KEY, OnnxRuntimeProvider


def test_cpu_sessions_default_to_no_spinning_and_the_user_can_override() -> None:
    assert OnnxRuntimeProvider(name="ort")._config() == {SPINNING_KEY: "0"}
    on = OnnxRuntimeProvider(name="ort", session_config={SPINNING_KEY: 1})
    assert on._config()[SPINNING_KEY] == "1"
    cuda = OnnxRuntimeProvider(name="ort_cuda", execution_provider="CUDAExecutionProvider")
    assert SPINNING_KEY not in cuda._config()
