"""Property-based tests for the per-leaf metrics."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dlopt.validation import compute_leaf_metrics

shapes = st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple)
finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def float_tensors(draw, shape=None):
    shape = draw(shapes) if shape is None else shape
    n = math.prod(shape)
    values = draw(st.lists(finite, min_size=n, max_size=n))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return torch.tensor(values, dtype=dtype).reshape(shape)


@settings(max_examples=40, deadline=None)
@given(float_tensors())
def test_identical_outputs_have_zero_error(ref):
    m = compute_leaf_metrics("out", ref.clone(), ref, atol=0.0, rtol=0.0)
    assert m.kind == "float"
    assert m.max_abs_error == 0.0
    assert m.rel_l2 == 0.0
    assert m.cosine == 1.0
    assert m.outside_count == 0 and m.outside_fraction == 0.0
    assert m.candidate_nonfinite == m.reference_nonfinite == m.nonfinite_mismatch == 0
    assert m.numel == ref.numel() and m.shape == tuple(ref.shape)


@settings(max_examples=40, deadline=None)
@given(float_tensors(), st.floats(0.01, 10.0))
def test_scaled_outputs(ref, scale):
    ref = ref.double()
    cand = ref * scale
    m = compute_leaf_metrics("out", cand, ref, atol=0.0, rtol=0.0)
    norm = float(torch.linalg.vector_norm(ref))
    if norm > 0:
        # c = s*r: ||c - r|| / ||r|| = |s - 1|, same direction.
        assert math.isclose(m.rel_l2, abs(scale - 1), rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(m.cosine, 1.0, abs_tol=1e-9)
        expected_max = float((ref.abs().max()) * abs(scale - 1))
        assert math.isclose(m.max_abs_error, expected_max, rel_tol=1e-9, abs_tol=1e-12)
    else:
        assert m.rel_l2 == 0.0 and m.cosine == 1.0


@settings(max_examples=40, deadline=None)
@given(float_tensors(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_outside_count_has_isclose_semantics(ref, atol, rtol):
    cand = ref + 0.5
    m = compute_leaf_metrics("out", cand, ref, atol=atol, rtol=rtol)
    c64, r64 = cand.double(), ref.double()
    expected = int((~torch.isclose(c64, r64, rtol=rtol, atol=atol)).sum())
    assert m.outside_count == expected
    assert m.outside_fraction == (expected / ref.numel() if ref.numel() else 0.0)
    assert 0.0 <= m.outside_fraction <= 1.0


@settings(max_examples=40, deadline=None)
@given(
    float_tensors(shape=(4, 5)),
    st.lists(st.integers(0, 19), min_size=1, max_size=5, unique=True),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)
def test_inserted_nonfinite_values_are_counted_and_excluded(ref, positions, bad):
    cand = ref.clone().reshape(-1)
    cand[positions] = bad
    cand = cand.reshape(ref.shape)
    m = compute_leaf_metrics("out", cand, ref, atol=1e-6, rtol=1e-6)
    assert m.candidate_nonfinite == len(positions)
    assert m.reference_nonfinite == 0
    assert m.nonfinite_mismatch == len(positions)
    # Errors are taken over elements finite in both: here they are identical.
    assert m.max_abs_error == 0.0
    assert m.outside_count == len(positions)
    for value in (m.max_abs_error, m.rel_l2, m.cosine, m.outside_fraction):
        assert value is None or math.isfinite(value)


def test_same_nonfinite_in_both_is_not_a_mismatch():
    ref = torch.tensor([1.0, math.nan, math.inf, -math.inf])
    m = compute_leaf_metrics("out", ref.clone(), ref, atol=0.0, rtol=0.0)
    assert m.reference_nonfinite == m.candidate_nonfinite == 3
    assert m.nonfinite_mismatch == 0
    assert m.outside_count == 0
    cand = torch.tensor([1.0, math.nan, -math.inf, -math.inf])
    m = compute_leaf_metrics("out", cand, ref, atol=0.0, rtol=0.0)
    assert m.nonfinite_mismatch == 1 and m.outside_count == 1


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(-100, 100), min_size=0, max_size=30),
    st.data(),
    st.sampled_from([torch.int64, torch.int32, torch.uint8, torch.bool]),
)
def test_integer_and_bool_leaves_count_mismatches(values, data, dtype):
    if dtype is torch.uint8:
        values = [abs(v) for v in values]
    ref = torch.tensor(values, dtype=torch.int64).to(dtype)
    flips = (
        data.draw(st.lists(st.integers(0, max(len(values) - 1, 0)), unique=True)) if values else []
    )
    cand = ref.clone()
    for i in flips:
        cand[i] = (~cand[i]) if dtype is torch.bool else cand[i] + 1
    m = compute_leaf_metrics("out", cand, ref, atol=0.0, rtol=0.0)
    assert m.kind == ("bool" if dtype is torch.bool else "integer")
    assert m.mismatch_count == len(flips)
    assert m.mismatch_fraction == (len(flips) / len(values) if values else 0.0)
    assert m.rel_l2 is None and m.outside_count is None


@given(st.sampled_from([(0,), (3, 0), (0, 2, 2)]), st.sampled_from([torch.float32, torch.int64]))
def test_empty_tensors(shape, dtype):
    ref = torch.zeros(shape, dtype=dtype)
    m = compute_leaf_metrics("out", ref.clone(), ref, atol=0.0, rtol=0.0)
    assert m.numel == 0
    if dtype.is_floating_point:
        assert (m.max_abs_error, m.rel_l2, m.cosine, m.outside_fraction) == (0.0, 0.0, 1.0, 0.0)
    else:
        assert m.mismatch_count == 0 and m.mismatch_fraction == 0.0


@settings(max_examples=40, deadline=None)
@given(float_tensors(shape=(3, 4)))
def test_zero_norm_reference(cand):
    ref = torch.zeros_like(cand)
    m = compute_leaf_metrics("out", cand, ref, atol=1e-3, rtol=0.0)
    if bool((cand == 0).all()):
        assert m.rel_l2 == 0.0 and m.cosine == 1.0
    else:
        # Undefined relative metrics are None with a note, never inf/NaN.
        assert m.rel_l2 is None and m.cosine is None
        assert any("all zeros" in n for n in m.notes)
        assert m.max_abs_error == float(cand.abs().max())
        # Metrics are computed in float64: float32 0.001 is 0.0010000000475 there.
        assert m.outside_count == int((cand.double().abs() > 1e-3).sum())


def test_zero_candidate_against_nonzero_reference():
    ref = torch.ones(4)
    m = compute_leaf_metrics("out", torch.zeros(4), ref, atol=0.0, rtol=0.0)
    assert m.rel_l2 == 1.0
    assert m.cosine is None


def test_python_scalars_and_low_precision_candidate():
    m = compute_leaf_metrics("out[0]", 1.5, 1.5, atol=0.0, rtol=0.0)
    assert m.kind == "float" and m.rel_l2 == 0.0
    m = compute_leaf_metrics("out[1]", 3, 4, atol=0.0, rtol=0.0)
    assert m.kind == "integer" and m.mismatch_count == 1
    ref = torch.randn(10, 10)
    m = compute_leaf_metrics("out", ref.to(torch.bfloat16), ref, atol=0.0, rtol=0.0)
    assert m.candidate_dtype == "bfloat16" and m.dtype == "float32"
    assert 0 < m.rel_l2 < 1e-2
