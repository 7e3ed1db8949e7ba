"""The reference's fp32 rounding, kept with a plan cache record and read back on a hit.

A selection measures how far eager fp32 is from a float64 run of the model, per case and
output (:mod:`dlopt.validation.rounding`), to widen the fp32 limits to what the reference
itself cannot tell from the exact result. That float64 run is a fixed cost of every
selection, a cache hit's check included: in a profile on 2 cores, 0.45 s of resnet50's
hit and 0.7 s of mobilenet_v2's. What it measures depends on the weights, torch, the machine and
its threads (all in the key) and on the input values (only their signatures are in the
key): a record keeps the measurement with the SHA-256 of the inputs' values
(:func:`dlopt.cache.key.inputs_sha256`), and it is read back only for inputs that hash the
same. Anything else (no measurement kept, other inputs, a malformed field) is measured
again.
"""

from __future__ import annotations

import math
from typing import Any

from dlopt.cache.key import inputs_sha256
from dlopt.validation.reference import MeasuredRounding, ReferenceOutputs
from dlopt.validation.rounding import LeafRounding


def reference_inputs_sha256(reference: ReferenceOutputs) -> str:
    """The SHA-256 of the values of every case's inputs, as the reference ran them."""
    return inputs_sha256((case.name, case.args, case.kwargs) for case in reference.cases)


def rounding_record(reference: ReferenceOutputs) -> dict[str, Any]:
    """What a record keeps of ``reference``'s measured rounding (strict JSON data)."""
    return {
        "inputs_sha256": reference_inputs_sha256(reference),
        "note": reference.fp32_rounding_note,
        "cases": [
            {
                path: {"rel_l2": leaf.rel_l2, "max_abs_error": leaf.max_abs_error}
                for path, leaf in case.fp32_rounding.items()
            }
            for case in reference.cases
        ],
    }


def stored_rounding(data: Any, reference: ReferenceOutputs) -> MeasuredRounding | None:
    """The rounding ``data`` (a record's field) holds for ``reference``'s very inputs, or
    ``None``: none kept, measured on other inputs, or not in the shape
    :func:`rounding_record` writes."""
    if not isinstance(data, dict) or data.get("inputs_sha256") != reference_inputs_sha256(
        reference
    ):
        return None
    note, cases = data.get("note"), data.get("cases")
    if not (note is None or isinstance(note, str)):
        return None
    if not isinstance(cases, list) or len(cases) != len(reference.cases):
        return None
    per_case: list[dict[str, LeafRounding]] = []
    for case in cases:
        if not isinstance(case, dict):
            return None
        leaves: dict[str, LeafRounding] = {}
        for path, value in case.items():
            leaf = _leaf(value)
            if leaf is None:
                return None
            leaves[path] = leaf
        per_case.append(leaves)
    return per_case, note


def _leaf(value: Any) -> LeafRounding | None:
    if not isinstance(value, dict) or set(value) != {"rel_l2", "max_abs_error"}:
        return None
    numbers = [value["rel_l2"], value["max_abs_error"]]
    if not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
        for x in numbers
    ):
        return None
    return LeafRounding(float(numbers[0]), float(numbers[1]))
