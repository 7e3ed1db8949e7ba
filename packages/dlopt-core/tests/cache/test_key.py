"""The cache key: canonical JSON, and every ingredient that can change a decision
changes the key."""

from __future__ import annotations

import attrs
import pytest
import torch

from dlopt.cache.key import (
    cache_ingredients,
    canonical_json,
    differences,
    hash_tensors,
    key_of,
)
from dlopt.pipeline.plans import choose_plans
from dlopt.plugins.discovery import PluginSettings, load_providers
from dlopt.settings.policy import DeploymentConstraints, OptimizationPolicy
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase, WorkloadProfile


class WithBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale


def model(seed: int = 0) -> WithBuffer:
    torch.manual_seed(seed)
    return WithBuffer().eval()


def workload(shape=(2, 4), weight: float = 1.0) -> WorkloadProfile:
    torch.manual_seed(1)
    return WorkloadProfile(cases=(WorkloadCase("a", args=(torch.randn(*shape),), weight=weight),))


def key(m=None, w=None, policy=None, target="cpu", plan_options=None, explicit=()) -> str:
    policy = policy or OptimizationPolicy(include=("native_channels_last",))
    if plan_options is not None:
        policy = attrs.evolve(policy, plan_options=plan_options)
    registry = load_providers(PluginSettings(autoload=False))
    candidates = choose_plans(registry, explicit, policy)
    ingredients = cache_ingredients(
        m if m is not None else model(),
        w if w is not None else workload(),
        policy,
        ExecutionTarget(target) if isinstance(target, str) else target,
        [c.info for c in candidates],
        [c.options for c in candidates],
    )
    return key_of(ingredients)


def test_canonical_json_has_one_spelling_per_value():
    assert canonical_json({"b": 1.0, "a": [0.1, 2]}) == canonical_json({"a": [0.1, 2.0], "b": 1})
    assert canonical_json({"x": 0.1}) == '{"x":0.1}'
    assert canonical_json({"x": float("nan"), "y": float("-inf")}) == '{"x":"nan","y":"-inf"}'
    assert key_of({"a": 1, "b": 2}) == key_of({"b": 2, "a": 1})


def test_the_same_inputs_give_the_same_key():
    assert key() == key()


def test_one_changed_weight_changes_the_key():
    changed = model()
    with torch.no_grad():
        changed.linear.weight[0, 0] += 1e-6
    assert key(changed) != key()


def test_one_changed_buffer_changes_the_key():
    changed = model()
    changed.scale[2] = 0.5
    assert key(changed) != key()


def test_same_structure_different_weights_never_share_a_key():
    assert key(model(0)) != key(model(1))


def test_tensor_hash_covers_dtype_and_shape_not_only_bytes():
    t = torch.zeros(4, dtype=torch.float32)
    assert hash_tensors([("t", t)]) != hash_tensors([("t", t.view(torch.int32))])
    assert hash_tensors([("t", t)]) != hash_tensors([("t", t.reshape(2, 2))])
    bf16 = torch.ones(3, dtype=torch.bfloat16)
    assert hash_tensors([("t", bf16)]) != hash_tensors([("t", bf16 * 2)])


@pytest.mark.parametrize(
    "changed",
    [
        {"w": workload(shape=(3, 4))},
        {"w": workload(weight=2.0)},
        {
            "policy": OptimizationPolicy(
                include=("native_channels_last",),
                constraints=DeploymentConstraints(min_speedup=1.05),
            )
        },
        {"policy": OptimizationPolicy(include=("native_channels_last", "native_bf16"))},
        {"target": ExecutionTarget("cpu", threads=1)},
    ],
    ids=["case_shape", "case_weight", "policy_field", "racing_plans", "target_threads"],
)
def test_each_ingredient_changes_the_key(changed):
    assert key(**changed) != key()


@attrs.frozen
class TunableOptions:
    level: int = attrs.field(default=1, metadata={"help": "how hard to tune"})


class TunablePlan:
    name = "tunable"
    precision = "fp32"
    options_type = TunableOptions

    def probe(self, context):  # pragma: no cover - never built here
        raise AssertionError

    def build(self, model, context):  # pragma: no cover - never built here
        raise AssertionError


def test_a_plan_option_changes_the_key():
    plain = OptimizationPolicy(include=("tunable",))
    tuned = attrs.evolve(plain, plan_options={"tunable": {"level": 2}})
    same = attrs.evolve(plain, plan_options={"tunable": {"level": 1}})
    assert key(policy=plain, explicit=(TunablePlan(),)) != key(
        policy=tuned, explicit=(TunablePlan(),)
    )
    # Options enter as the values the plan races with: the default spelled out is the same.
    assert key(policy=plain, explicit=(TunablePlan(),)) == key(
        policy=same, explicit=(TunablePlan(),)
    )


def test_include_order_does_not_change_the_key():
    one = OptimizationPolicy(include=("native_channels_last", "eager_fp32"))
    other = OptimizationPolicy(include=("eager_fp32", "native_channels_last"))
    assert key(policy=one) == key(policy=other)


@pytest.mark.parametrize("lost", [(), ("native_channels_last",)], ids=["watched", "lost"])
def test_the_isolated_workers_wrapper_keeps_the_key(tmp_path, lost):
    """An isolated worker wraps every provider to watch it; the key names the provider's
    own class, so a record an isolated selection (a fleet race) stored is found by a
    serving process selecting in process. A resumed worker keeps a plan lost to a crash
    chosen, answering its probe "unavailable" without running it: its record is keyed by
    the plan set the selection asked for, so the same selection finds it."""
    from dlopt.isolation.journal import Heartbeat, JournalWriter
    from dlopt.isolation.worker import Watched, WatchedProvider

    policy = OptimizationPolicy(include=("native_channels_last",))
    registry = load_providers(PluginSettings(autoload=False))
    candidates = choose_plans(registry, (), policy)
    journal, heartbeat = JournalWriter(tmp_path / "j"), Heartbeat(tmp_path / "h", create=True)
    watched = Watched(policy, journal, heartbeat, frozenset(lost))
    wrapped = [
        attrs.evolve(c.info, provider=WatchedProvider(c.info.provider, watched)) for c in candidates
    ]
    assert [i.name for i in wrapped] == ["eager_fp32", "native_channels_last"]
    if lost:  # answered by the wrapper: the provider is never asked
        answer = wrapped[1].provider.probe(None)
        assert not answer.available and "earlier isolated worker" in answer.reason

    def key_with(infos):
        ingredients = cache_ingredients(
            model(),
            workload(),
            policy,
            ExecutionTarget("cpu"),
            infos,
            [c.options for c in candidates],
        )
        return key_of(ingredients)

    assert key_with(wrapped) == key_with([c.info for c in candidates])


def test_the_thread_count_changes_the_key():
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = key()
        torch.set_num_threads(2)
        two = key()
    finally:
        torch.set_num_threads(previous)
    assert one != two


def test_differences_name_the_changed_ingredients():
    old = {"model": {"parameters_sha256": "a", "class": "M"}, "plans": [{"name": "x"}]}
    new = {"model": {"parameters_sha256": "b", "class": "M"}, "plans": [{"name": "y"}]}
    assert differences(old, new) == ["model.parameters_sha256", "plans[0].name"]
    assert differences(old, old) == []


def test_the_inputs_hash_reads_values_where_the_key_reads_signatures() -> None:
    from dlopt.cache.key import inputs_sha256

    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)

    def of(args, kwargs=None, name="c"):
        return inputs_sha256([(name, args, kwargs or {})])

    assert of((x,)) == of((x.clone(),))
    assert of((x,)) != of((x + 1,))
    assert of((x,)) != of((x,), name="d")
    assert of((x,), {"scale": 2}) != of((x,), {"scale": 3})
    assert of((x, None)) != of((None, x))
