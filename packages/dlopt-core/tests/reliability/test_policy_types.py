"""Fault class: policy values of the wrong type. Refused at construction, with a message.

Ints are ints (not bools, not 2.5), numbers are finite numbers (not bools, not strings),
enumerations are checked, and nested configs are the right classes: a wrong value never
gets as far as a race or a report that cannot be loaded back.
"""

from __future__ import annotations

import math

import pytest

from dlopt.errors import ConfigurationError, WorkloadError
from dlopt.measurement import MeasurementPolicy
from dlopt.platform.serialization import dumps, from_jsonable, parse_strict_json
from dlopt.settings.policy import DeploymentConstraints, OptimizationPolicy
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.validation import LimitOverride, QualityLimits, QualityPolicy, UserMetric

NOT_INTS = [0.5, 2.5, True, "3", math.nan]


def _fn(candidate, reference):
    return 1.0


@pytest.mark.parametrize("threads", [0, -1, 2.0, True, False, "4"])
def test_target_threads(threads):
    with pytest.raises(ConfigurationError, match=rf"ExecutionTarget.threads.*{threads!r}"):
        ExecutionTarget(threads=threads)


def test_target_accepts_good_values():
    assert ExecutionTarget(threads=4).threads == 4
    assert ExecutionTarget(threads=None).threads is None


#: (DeploymentConstraints arguments, the field its error must name)
BAD_CONSTRAINTS = [
    ({"expected_calls": 2.5}, "expected_calls"),
    ({"expected_calls": True}, "expected_calls"),
    ({"expected_calls": -1}, "expected_calls"),
    ({"expected_calls": "10"}, "expected_calls"),
    ({"min_speedup": True}, "min_speedup"),
    ({"min_speedup": "1.1"}, "min_speedup"),
    ({"min_speedup": math.inf}, "min_speedup"),
    ({"max_setup_time_s": False}, "max_setup_time_s"),
    ({"max_latency_ms": math.nan}, "max_latency_ms"),
]

#: (OptimizationPolicy arguments, the field its error must name)
BAD_POLICY = [
    ({"constraints": {"min_speedup": 1.1}}, "constraints"),
    ({"measurement": {"seed": 1}}, "measurement"),
    ({"quality": {}}, "quality"),
    ({"include": [3]}, "include"),
    ({"include": ["ok", None]}, "include"),
    ({"include": 5}, "include"),
    ({"exclude": [b"eager"]}, "exclude"),
    ({"objective": 3}, "objective"),
]

#: (MeasurementPolicy arguments, the field its error must name)
BAD_MEASUREMENT = [
    ({"seed": "abc"}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"seed": True}, "seed"),
    ({"seed": -1}, "seed"),
    ({"max_time_s": True}, "max_time_s"),
    ({"confidence": True}, "confidence"),
    ({"min_rounds": 4.0}, "min_rounds"),
    ({"settle_tolerance": True}, "settle_tolerance"),
    ({"futility_confidence": True}, "futility_confidence"),
    ({"family_wise": 1}, "family_wise"),
]


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        *((DeploymentConstraints, *bad) for bad in BAD_CONSTRAINTS),
        *((OptimizationPolicy, *bad) for bad in BAD_POLICY),
        *((MeasurementPolicy, *bad) for bad in BAD_MEASUREMENT),
    ],
)
def test_a_bad_policy_value_names_its_field(cls, kwargs, field):
    with pytest.raises(ConfigurationError, match=rf"{cls.__name__}.{field}"):
        cls(**kwargs)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: QualityPolicy(limits={"atol": 1e-3}), "limits"),
        (lambda: QualityPolicy(per_precision={"bf16": {"atol": 1}}), "per_precision"),
        (lambda: QualityPolicy(per_output={"out": 3}), "per_output"),
        (lambda: QualityPolicy(user_metrics=[{"name": "x"}]), "user_metrics"),
        (lambda: QualityPolicy(allow_nonfinite_reference="no"), "allow_nonfinite_reference"),
        (lambda: QualityPolicy(snapshot_weights=0), "snapshot_weights"),
        (lambda: QualityPolicy(reference_rel_tolerance=True), "reference_rel_tolerance"),
        (lambda: UserMetric("m", _fn, limit=True), "limit"),
        (lambda: UserMetric(3, _fn, limit=0.5), "name"),
        (lambda: UserMetric("m", _fn, 0.5, path=3), "path"),
        (lambda: LimitOverride(atol=True), "atol"),
        (lambda: QualityLimits(1e-3, 1e-3, 0.0, 1e-3, "0.9"), "min_cosine"),
    ],
)
def test_quality_policy(make, field):
    with pytest.raises(ConfigurationError, match=field):
        make()


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: WorkloadCase("c", weight=True), "weight"),
        (lambda: WorkloadCase("c", weight="2"), "weight"),
        (lambda: WorkloadCase("c", kwargs={1: 2}), "kwargs"),
        (lambda: WorkloadProfile([WorkloadCase("c")], expected_calls=2.5), "expected_calls"),
        (lambda: WorkloadProfile([WorkloadCase("c")], expected_calls=True), "expected_calls"),
        (lambda: WorkloadProfile([WorkloadCase("c")], name=3), "name"),
        (lambda: WorkloadProfile(["not a case"]), "cases"),
    ],
)
def test_workload(make, field):
    with pytest.raises(WorkloadError, match=field):
        make()


def test_good_values_still_work_and_round_trip():
    policy = OptimizationPolicy(
        include="eager_fp32",
        exclude=("native_bf16",),
        constraints=DeploymentConstraints(min_speedup=1, expected_calls=10, max_setup_time_s=30),
        measurement=MeasurementPolicy(seed=0, max_time_s=5),
        quality=QualityPolicy(reference_rel_tolerance=0),
    )
    assert policy.include == ("eager_fp32",)
    assert WorkloadCase("c", weight=2).weight == 2
    assert (
        from_jsonable(parse_strict_json(dumps(policy.constraints)), DeploymentConstraints)
        == policy.constraints
    )
    assert (
        from_jsonable(parse_strict_json(dumps(policy.measurement)), MeasurementPolicy)
        == policy.measurement
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"expected_calls": 2.5}', "expected_calls"),
        ('{"expected_calls": true}', "expected_calls"),
        ('{"min_speedup": "1.1"}', "min_speedup"),
    ],
)
def test_json_values_of_the_wrong_type_are_refused_too(text, field):
    with pytest.raises(ConfigurationError, match=field):
        from_jsonable(parse_strict_json(text), DeploymentConstraints)


def test_json_bools_are_bools():
    with pytest.raises(ConfigurationError, match="family_wise"):
        from_jsonable(parse_strict_json('{"family_wise": "false"}'), MeasurementPolicy)


POLICY_TYPES = [
    OptimizationPolicy,
    DeploymentConstraints,
    MeasurementPolicy,
    QualityPolicy,
    LimitOverride,
]


@pytest.mark.parametrize("cls", POLICY_TYPES, ids=lambda c: c.__name__)
def test_from_jsonable_round_trips_every_policy_type(cls):
    # `from_jsonable({}, OptimizationPolicy)` raised NameError: its annotations name
    # classes imported only for type checking.
    default = from_jsonable({}, cls)
    assert default == cls()
    assert from_jsonable(parse_strict_json(dumps(default)), cls) == default


def test_quality_limits_round_trip():
    from dlopt.settings.quality import default_limits

    limits = default_limits("bf16")
    assert from_jsonable(parse_strict_json(dumps(limits)), QualityLimits) == limits


def test_a_full_policy_document_round_trips():
    policy = OptimizationPolicy(
        objective="lifecycle_latency",
        include=("eager_fp32",),
        constraints=DeploymentConstraints(min_speedup=1.1, expected_calls=1000),
        measurement=MeasurementPolicy(seed=7, max_time_s=5),
        quality=QualityPolicy(limits=LimitOverride(atol=1e-3), reference_rel_tolerance=1e-6),
        plan_options={"onnxruntime_cpu": {"intra_op_threads": 2}},
    )
    assert from_jsonable(parse_strict_json(dumps(policy)), OptimizationPolicy) == policy


@pytest.mark.parametrize(
    ("cls", "document", "where", "hint"),
    [
        (OptimizationPolicy, {"objectve": "steady_state_latency"}, "objectve", "'objective'"),
        (
            OptimizationPolicy,
            {"constraints": {"min_sped": 1.1}},
            "constraints.min_sped",
            "'min_speedup'",
        ),
        (
            OptimizationPolicy,
            {"quality": {"limits": {"atoll": 1}}},
            "quality.limits.atoll",
            "'atol'",
        ),
        (OptimizationPolicy, {"measurement": {"sead": 1}}, "measurement.sead", "'seed'"),
        (DeploymentConstraints, {"bogus": 1}, "bogus", None),
    ],
)
def test_unknown_keys_in_a_policy_document_are_refused_by_name(cls, document, where, hint):
    with pytest.raises(ConfigurationError, match="unknown key") as caught:
        from_jsonable(document, cls)
    message = str(caught.value)
    assert f"{where}: unknown key" in message
    assert (hint is None) or f"did you mean {hint}" in message


def test_reports_still_keep_fields_a_newer_dlopt_added(finished_report):
    from dlopt.evidence.report import OptimizationReport

    data = parse_strict_json(dumps(finished_report))
    data["added_by_a_newer_dlopt"] = {"x": 1}
    assert from_jsonable(data, OptimizationReport).selected_plan == finished_report.selected_plan


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: WorkloadCase("c", args=(t.zeros(0, 16),)), "batch of size 0"),
        (lambda t: WorkloadCase("c", args=([t.ones(2), t.zeros(3, 0)],)), r"args\[0\]\[1\]"),
        (lambda t: WorkloadCase("c", kwargs={"mask": t.zeros(0)}), "kwargs\\['mask'\\]"),
        (
            lambda t: WorkloadProfile(
                [WorkloadCase("a", weight=1e308), WorkloadCase("b", weight=1e308)]
            ),
            "overflow when summed",
        ),
        (lambda t: WorkloadCase("c", weight=math.inf), "finite"),
    ],
)
def test_zero_size_batches_and_overflowing_weights_are_refused_at_construction(make, message):
    import torch

    with pytest.raises(WorkloadError, match=message):
        make(torch)


def test_probe_timeout_beyond_a_day_is_refused():
    with pytest.raises(ConfigurationError, match="probe_timeout_s"):
        OptimizationPolicy(probe_timeout_s=1e10)
    assert OptimizationPolicy(probe_timeout_s=86400).probe_timeout_s == 86400


# -- documents of the wrong shape ----------------------------------------------------------
@pytest.mark.parametrize("field", ["include", "exclude"])
def test_a_bare_string_where_a_list_of_plan_names_goes_is_refused_not_split(field):
    # A string is iterable: read as a list it became the list of its letters.
    with pytest.raises(ConfigurationError) as caught:
        from_jsonable({field: "eager_fp32"}, OptimizationPolicy)
    message = str(caught.value)
    assert f'{field}: expected a list, got the string "eager_fp32"' in message
    assert '["eager_fp32"]' in message
    with pytest.raises(ConfigurationError, match=r"quality\.user_metrics: expected a list"):
        from_jsonable({"quality": {"user_metrics": "top1"}}, OptimizationPolicy)
    with pytest.raises(
        ConfigurationError, match=r"include\[1\]: expected a name \(text\), got int 3"
    ):
        from_jsonable({"include": ["eager_fp32", 3]}, OptimizationPolicy)
    # The list itself, and null for "every plan", are what a document takes.
    assert getattr(from_jsonable({field: ["eager_fp32"]}, OptimizationPolicy), field) == (
        "eager_fp32",
    )
    assert from_jsonable({"include": None}, OptimizationPolicy).include is None


@pytest.mark.parametrize("cls", POLICY_TYPES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("document", [[], None, "steady_state_latency", 3, ["a"]])
def test_every_policy_type_refuses_a_document_that_is_not_a_mapping(cls, document):
    with pytest.raises(ConfigurationError) as caught:
        from_jsonable(document, cls)
    assert str(caught.value).startswith(
        f"{cls.__name__} document: expected a mapping of {cls.__name__}'s fields"
    )


@pytest.mark.parametrize(
    ("document", "where", "nested"),
    [
        ({"measurement": []}, "measurement", "MeasurementPolicy"),
        ({"constraints": None}, "constraints", "DeploymentConstraints"),
        ({"quality": {"limits": "tight"}}, "quality.limits", "LimitOverride"),
    ],
)
def test_a_nested_policy_that_is_not_a_mapping_is_refused_at_its_path(document, where, nested):
    with pytest.raises(ConfigurationError, match=f"{where}: expected a mapping of {nested}'s"):
        from_jsonable(document, OptimizationPolicy)


def test_every_problem_of_a_policy_document_is_named_at_once():
    with pytest.raises(ConfigurationError) as caught:
        from_jsonable(
            {"include": "eager_fp32", "measurement": 3, "objectve": "x"}, OptimizationPolicy
        )
    message = str(caught.value)
    assert "include: expected a list" in message
    assert "measurement: expected a mapping" in message
    assert "objectve: unknown key (did you mean 'objective'?)" in message
