"""Fault class: a plan labelled with a lower precision than it actually computes in.

Core's half: the candidates table says how much of the model a partly quantized plan
quantized, from the counts a quantizing plan reports in its metadata. The providers' own
counts (ONNX Runtime int8, torchao) are checked in ``tests/integration``.
"""

from __future__ import annotations


def test_the_table_says_how_much_of_the_model_a_partial_plan_quantized():
    from dlopt.cli.cmd_report import quantized_share

    assert quantized_share(
        {"quantized_fraction": 0.125, "quantized_ops": 1, "quantizable_ops": 8}
    ) == ("quantized 1 of 8 ops")
    assert quantized_share(
        {"quantized_fraction": 0.5, "quantized_layers": 1, "quantizable_layers": 2}
    ) == ("quantized 1 of 2 layers")
    assert (
        quantized_share({"quantized_fraction": 1.0, "quantized_ops": 2, "quantizable_ops": 2})
        is None
    )
    assert quantized_share({}) is None
