"""Structure mismatches of every kind name the exact path."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import pytest
import torch

from dlopt.validation import QualityPolicy, iter_leaves, match_structure, validate_outputs

Pair = namedtuple("Pair", ["left", "right"])
Other = namedtuple("Other", ["left", "right"])


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    extra: object = None


def ref_outputs():
    return {
        "logits": (torch.zeros(8, 4), torch.zeros(8, 10)),
        "pair": Pair(torch.zeros(2), torch.ones(2, dtype=torch.int64)),
        "data": Out(torch.zeros(3), [1, 2.5, "tag", None]),
        "none": None,
    }


def mutate(fn):
    out = ref_outputs()
    fn(out)
    return out


CASES = [
    (
        lambda o: o.__setitem__("logits", (o["logits"][0], torch.zeros(8, 11))),
        'out["logits"][1]: shape (8, 11) vs reference (8, 10)',
    ),
    (
        lambda o: o.__setitem__(
            "logits", (o["logits"][0], torch.zeros(8, 10, dtype=torch.float16))
        ),
        'out["logits"][1]: dtype torch.float16 vs reference torch.float32 (the plan declared no output_dtype)',
    ),
    (
        lambda o: o.__setitem__("logits", list(o["logits"])),
        'out["logits"]: type list vs reference tuple',
    ),
    (
        lambda o: o.__setitem__("logits", o["logits"] + (torch.zeros(1),)),
        'out["logits"]: length 3 vs reference 2',
    ),
    (lambda o: o.pop("none"), "out: missing keys ['none']"),
    (lambda o: o.__setitem__("new", 1), "out: unexpected keys ['new']"),
    (lambda o: o.__setitem__("none", torch.zeros(1)), 'out["none"]: Tensor vs reference None'),
    (
        lambda o: o.__setitem__("pair", Other(*o["pair"])),
        'out["pair"]: type Other vs reference Pair',
    ),
    (
        lambda o: o.__setitem__("pair", Pair(o["pair"].left, o["pair"].right.float())),
        'out["pair"].right: dtype torch.float32 vs reference torch.int64',
    ),
    (
        lambda o: setattr(o["data"], "logits", torch.zeros(4)),
        'out["data"].logits: shape (4,) vs reference (3,)',
    ),
    (
        lambda o: setattr(o["data"], "extra", [1, 2.5, "TAG", None]),
        "out[\"data\"].extra[2]: value 'TAG' vs reference 'tag'",
    ),
    (
        lambda o: setattr(o["data"], "extra", [1.0, 2.5, "tag", None]),
        'out["data"].extra[0]: type float vs reference int',
    ),
    (
        lambda o: setattr(o["data"], "extra", [True, 2.5, "tag", None]),
        'out["data"].extra[0]: type bool vs reference int',
    ),
    (
        lambda o: setattr(o["data"], "extra", [1, 2.5, "tag", torch.zeros(1)]),
        'out["data"].extra[3]: Tensor vs reference None',
    ),
    (
        lambda o: o.__setitem__("data", {"logits": torch.zeros(3), "extra": None}),
        'out["data"]: type dict vs reference Out',
    ),
]


@pytest.mark.parametrize(("change", "expected"), CASES)
def test_mismatch_names_path(change, expected):
    candidate = mutate(change)
    _, problems = match_structure(candidate, ref_outputs())
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected)
    case = validate_outputs(
        candidate, ref_outputs(), precision="fp32", policy=QualityPolicy(), case_name="batch-8"
    )
    assert not case.passed
    assert case.leaves == ()
    assert case.structure == tuple(problems)
    assert case.reason.startswith("case 'batch-8', structure mismatch: " + expected)


def test_identical_structure_passes():
    case = validate_outputs(ref_outputs(), ref_outputs(), precision="fp32", case_name="c")
    assert case.passed and case.reason is None
    paths = [leaf.path for leaf in case.leaves]
    assert paths == [
        'out["logits"][0]',
        'out["logits"][1]',
        'out["pair"].left',
        'out["pair"].right',
        'out["data"].logits',
        'out["data"].extra[0]',
        'out["data"].extra[1]',
    ]


def test_declared_output_dtype_is_upcast():
    ref = (torch.randn(4, 4),)
    cand = (ref[0].to(torch.float16),)
    _, problems = match_structure(cand, ref, output_dtype=torch.float16)
    assert problems == []
    case = validate_outputs(cand, ref, precision="fp16", output_dtype=torch.float16, case_name="c")
    assert case.passed, case.reason
    assert case.leaves[0].candidate_dtype == "float16"
    # Declaring fp16 does not excuse bf16 outputs, nor integer dtype changes.
    _, problems = match_structure((ref[0].bfloat16(),), ref, output_dtype=torch.float16)
    assert problems == [
        "out[0]: dtype torch.bfloat16 vs reference torch.float32 (the plan declared output_dtype=torch.float16)"
    ]
    _, problems = match_structure(
        torch.zeros(2, dtype=torch.int32),
        torch.zeros(2, dtype=torch.int64),
        output_dtype=torch.int32,
    )
    assert problems == ["out: dtype torch.int32 vs reference torch.int64"]


def test_several_mismatches_are_all_listed():
    ref = (torch.zeros(2), torch.zeros(3))
    cand = (torch.zeros(3), torch.zeros(4))
    case = validate_outputs(cand, ref, precision="fp32", case_name="c")
    assert case.structure == (
        "out[0]: shape (3,) vs reference (2,)",
        "out[1]: shape (4,) vs reference (3,)",
    )
    assert "; also structure mismatch: out[1]: shape (4,)" in case.reason


def test_unsupported_type_is_named_with_path():
    with pytest.raises(TypeError, match=r"out\[0\]: unsupported output type builtins.object"):
        iter_leaves((object(),))
    _, problems = match_structure((object(),), (object(),))
    assert problems == ["out[0]: unsupported output type object"]


def test_key_paths_for_non_string_keys():
    leaves = iter_leaves({0: torch.zeros(1), "a b": torch.zeros(1), ("t", 1): torch.zeros(1)})
    assert [p for p, _ in leaves] == ["out[0]", 'out["a b"]', "out[('t', 1)]"]
