"""Contract suite 2 judged on providers: a correct one passes, every wrong one fails.

Each wrong provider is a correct provider with one fault. The suite's check methods are
called directly (no pytester): a failure is ``pytest.fail`` (``Failed``) or an
``AssertionError`` with a message naming what is wrong.
"""

from __future__ import annotations

import copy
import json
import time
import types
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from dlopt.plugin import (
    EAGER_SERVING,
    BuiltPlan,
    Concurrency,
    Precision,
    Provider,
    ProviderAvailability,
    ProviderContext,
    Quantization,
    Role,
    ServingTraits,
    atomic_write_text,
    map_tensors,
    try_import,
)
from dlopt.testing import REQUIRE_AVAILABLE_ENV, ProviderContractSuite, check_entry_point_claims
from dlopt.testing.models import SmallConvNet

FAILED = pytest.fail.Exception
SKIPPED = pytest.skip.Exception

#: Every check that builds; each takes ``tmp_path`` only.
BUILD_CHECKS = (
    "test_build_serves_every_case_through_the_gate",
    "test_build_and_close_twice",
    "test_dynamic_shapes",
    "test_keyword_inputs",
    "test_nested_outputs",
    "test_saved_plan_reloads",
)


@attrs.frozen
class GoodOptions:
    threads: int = attrs.field(default=1, metadata={"help": "worker threads of the fake SDK"})


def _weights_to_json(model: torch.nn.Module) -> str:
    state = {
        name: {
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
            "values": t.flatten().tolist(),
        }
        for name, t in model.state_dict().items()
    }
    return json.dumps(state, allow_nan=False)


def _weights_from_json(model: torch.nn.Module, text: str) -> torch.nn.Module:
    state = {
        name: torch.tensor(entry["values"], dtype=getattr(torch, entry["dtype"])).reshape(
            entry["shape"]
        )
        for name, entry in json.loads(text).items()
    }
    model.load_state_dict(state)
    return model.eval()


class GoodProvider(Provider):
    """A correct provider: a private copy of the model, weights saved as JSON (no pickle)
    and loaded back into a fresh model of the suite's default architecture."""

    name = "good_npu"
    precision = Precision.FP32
    role = Role.CHALLENGER
    options_type = GoodOptions

    def __init__(self) -> None:
        self.closes = 0

    def availability(self, context: ProviderContext) -> ProviderAvailability:
        return ProviderAvailability.ok(sdk_versions={"fake-npu-sdk": "1.0"})

    def compute(self, model: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        return model(*args, **kwargs)

    def make_plan(self, plan_model: torch.nn.Module, **fields: Any) -> BuiltPlan:
        provider = self

        def runner(*args: Any, **kwargs: Any) -> Any:
            return provider.compute(plan_model, args, kwargs)

        def on_close() -> None:
            provider.closes += 1

        fields.setdefault("precision", self.precision)
        fields.setdefault("on_close", on_close)
        return BuiltPlan(runner=runner, **fields)

    def build(self, model: torch.nn.Module, context: ProviderContext) -> BuiltPlan:
        assert context.cases and context.availability is not None
        assert isinstance(context.options, GoodOptions)
        weights = self.plan_dir(context) / "weights.json"
        atomic_write_text(weights, _weights_to_json(model))
        return self.make_plan(
            copy.deepcopy(model), artifacts={"weights": weights}, metadata={"format": "json"}
        )

    def load(self, directory: Path, metadata: dict, context: ProviderContext) -> BuiltPlan:
        model = _weights_from_json(SmallConvNet(), (directory / "weights.json").read_text())
        return self.make_plan(model, metadata=metadata)


class FullSuite(ProviderContractSuite):
    """Every capability declared: the strictest form of the suite."""

    distribution = "dlopt-core"
    supports_dynamic_shapes = True
    supports_keyword_inputs = True
    supports_nested_outputs = True
    supports_save_load = True
    require_available = False


def suite(provider: type[Provider], base: type = FullSuite, **attributes: Any) -> Any:
    """An instance of a suite subclass checking ``provider`` (not collected by pytest)."""
    namespace = {"make_provider": lambda self: provider(), **attributes}
    return type("Suite", (base,), namespace)()


def _gate_check_fails(provider: type[Provider], match: str, tmp_path: Path) -> None:
    """The suite's build-and-gate check fails on ``provider``, saying ``match``."""
    with pytest.raises(FAILED, match=match):
        suite(provider).test_build_serves_every_case_through_the_gate(tmp_path)


def _passes_the_gate_but_not(
    provider: type[Provider], check: str, error: Any, match: str, tmp_path: Path
) -> None:
    """``provider`` passes the build-and-gate check, then fails the suite's ``check``
    with ``error`` saying ``match``."""
    instance = suite(provider)
    instance.test_build_serves_every_case_through_the_gate(tmp_path / "gate")
    with pytest.raises(error, match=match):
        getattr(instance, check)(tmp_path / check)


def run_checks(instance: Any, tmp_path: Path, names: tuple[str, ...] = BUILD_CHECKS) -> None:
    for name in names:
        getattr(instance, name)(tmp_path / name)


# ----------------------------------------------------------------- the correct provider


def test_a_correct_provider_passes_every_check(tmp_path, monkeypatch):
    instance = suite(GoodProvider)
    run_checks(instance, tmp_path)
    instance.test_declares_name_role_and_precision()
    instance.test_options_are_attrs_with_defaults_and_help()
    instance.test_probe_is_typed_and_fast(tmp_path / "probe")


def test_the_build_context_is_the_races(tmp_path):
    seen: list[ProviderContext] = []

    class Recording(GoodProvider):
        def build(self, model, context):
            seen.append(context)
            return super().build(model, context)

    suite(Recording).test_build_serves_every_case_through_the_gate(tmp_path)
    (context,) = seen
    assert [c.name for c in context.cases] == ["batch-1", "batch-4"]
    assert context.cases[0].args[0].shape == (1, 3, 16, 16)
    assert context.cases[0].reference.shape == (1, 5)
    assert context.availability.sdk_versions == {"fake-npu-sdk": "1.0"}
    assert context.options == GoodOptions()
    assert context.artifact_dir.is_relative_to(tmp_path)


def test_a_plan_in_bf16_that_declares_its_output_dtype_passes(tmp_path):
    class Bf16(GoodProvider):
        precision = Precision.BF16

        def compute(self, model, args, kwargs):
            return map_tensors(lambda t: t.to(torch.bfloat16), model(*args, **kwargs))

        def make_plan(self, plan_model, **fields):
            return super().make_plan(plan_model, output_dtype=torch.bfloat16, **fields)

    run_checks(suite(Bf16), tmp_path)


# ----------------------------------------------------------------- availability


class NeverAvailable(GoodProvider):
    """Its probe looks for a misspelled SDK module: it can never be available."""

    install_hint = "pip install mynpu-sdk"

    def availability(self, context):
        _, error = try_import("mynpu_sdkk")
        if error:
            return ProviderAvailability.unavailable(f"mynpu SDK: {error}", self.install_hint)
        return super().availability(context)


def test_a_provider_that_is_never_available_skips_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv(REQUIRE_AVAILABLE_ENV, raising=False)
    instance = suite(NeverAvailable, require_available=None)
    for name in BUILD_CHECKS:
        with pytest.raises(SKIPPED, match="mynpu_sdkk"):
            getattr(instance, name)(tmp_path / name)


def test_a_provider_that_is_never_available_fails_where_it_is_required(tmp_path, monkeypatch):
    monkeypatch.setenv(REQUIRE_AVAILABLE_ENV, "1")
    instance = suite(NeverAvailable, require_available=None)
    for name in BUILD_CHECKS:
        with pytest.raises(FAILED, match=r"unavailable here: .*mynpu_sdkk.*must be available"):
            getattr(instance, name)(tmp_path / name)
    with pytest.raises(FAILED, match=REQUIRE_AVAILABLE_ENV):
        instance.test_probe_is_typed_and_fast(tmp_path / "probe")


# ----------------------------------------------------------------- outputs


def test_bf16_outputs_without_output_dtype_fail(tmp_path):
    class Bf16Undeclared(GoodProvider):
        precision = Precision.BF16

        def compute(self, model, args, kwargs):
            return model(*args, **kwargs).to(torch.bfloat16)

    _gate_check_fails(
        Bf16Undeclared, r"validation gate.*dtype.*output_dtype=torch.bfloat16", tmp_path
    )


def test_nested_outputs_with_the_wrong_inner_structure_fail(tmp_path):
    class StackedInner(GoodProvider):
        def compute(self, model, args, kwargs):
            out = model(*args, **kwargs)
            if isinstance(out, dict):  # the inner list comes back as one stacked tensor
                return {**out, "pooled": torch.stack(out["pooled"])}
            return out

    with pytest.raises(FAILED, match=r"validation gate.*structure.*pooled"):
        suite(StackedInner).test_nested_outputs(tmp_path)


def test_outputs_off_by_more_than_the_precisions_limits_fail(tmp_path):
    # 15% off: inside the old suite's fixed 0.25 tolerance, outside int8's limits.
    class FifteenPercentOff(GoodProvider):
        precision = Precision.INT8

        def compute(self, model, args, kwargs):
            return model(*args, **kwargs) * 1.15

    _gate_check_fails(FifteenPercentOff, r"\(int8\) failed the validation gate", tmp_path)


def test_outputs_on_another_device_than_the_inputs_fail(tmp_path):
    class OnMeta(GoodProvider):
        def compute(self, model, args, kwargs):
            return model(*args, **kwargs).to("meta")

    _gate_check_fails(OnMeta, r"output tensor 0 on meta for inputs on cpu", tmp_path)


def test_keyword_inputs_that_are_ignored_fail(tmp_path):
    class DropsKeywords(GoodProvider):
        def compute(self, model, args, kwargs):
            return model(*args)

    with pytest.raises(FAILED, match="validation gate"):
        suite(DropsKeywords).test_keyword_inputs(tmp_path)


def test_a_plan_that_serves_only_the_shapes_it_was_built_for_fails(tmp_path):
    class StaticShapes(GoodProvider):
        def build(self, model, context):
            self.shapes = {tuple(c.args[0].shape) for c in context.cases}
            return super().build(model, context)

        def compute(self, model, args, kwargs):
            out = model(*args, **kwargs)
            return out if tuple(args[0].shape) in self.shapes else torch.zeros_like(out)

    _passes_the_gate_but_not(
        StaticShapes, "test_dynamic_shapes", FAILED, "unseen-batch-5", tmp_path
    )


# ----------------------------------------------------------------- inputs and model


def test_a_plan_that_writes_into_its_inputs_fails(tmp_path):
    class MutatesInputs(GoodProvider):
        def compute(self, model, args, kwargs):
            out = model(*args, **kwargs)
            args[0].mul_(0)
            return out

    _gate_check_fails(
        MutatesInputs, r"wrote into its inputs on case 'batch-1' \(args\[0\]", tmp_path
    )


def test_a_build_that_changes_the_callers_model_fails(tmp_path):
    class FoldsInPlace(GoodProvider):
        def build(self, model, context):
            with torch.no_grad():
                model.conv.weight.mul_(2)
            return super().build(model, context)

    _gate_check_fails(
        FoldsInPlace, r"mutated the user's model during build: .*conv.weight", tmp_path
    )


def test_a_plan_that_changes_the_callers_model_when_called_fails(tmp_path):
    class CountsIntoTheModel(GoodProvider):
        def build(self, model, context):
            plan = super().build(model, context)

            def runner(*args, **kwargs):
                model.bn.running_mean.add_(1)  # state kept in the caller's buffers
                return model(*args, **kwargs)

            plan.runner = runner
            return plan

    _gate_check_fails(
        CountsIntoTheModel, r"mutated the user's model during first_call: .*bn", tmp_path
    )


# ----------------------------------------------------------------- close


def test_a_plan_whose_on_close_raises_fails(tmp_path):
    class OnCloseRaises(GoodProvider):
        def make_plan(self, plan_model, **fields):
            def on_close():
                raise RuntimeError("npu handle already freed")

            return super().make_plan(plan_model, on_close=on_close, **fields)

    _gate_check_fails(
        OnCloseRaises, r"on_close raised RuntimeError: npu handle already freed", tmp_path
    )


def test_a_plan_whose_close_is_not_idempotent_fails(tmp_path):
    class ReleasesOnEveryClose(BuiltPlan):
        def close(self):
            self.closed = True
            if self.on_close is not None:
                self.on_close()

    class NotIdempotent(GoodProvider):
        def make_plan(self, plan_model, **fields):
            plan = super().make_plan(plan_model, **fields)
            # The same plan, every field as built, with a close() that is not idempotent.
            same = {a.name: getattr(plan, a.name) for a in attrs.fields(BuiltPlan) if a.init}
            return ReleasesOnEveryClose(**same)

    _gate_check_fails(NotIdempotent, r"on_close ran 2 times over two close\(\) calls", tmp_path)


def test_a_provider_that_cannot_build_after_a_close_fails(tmp_path):
    class SharedSession(GoodProvider):
        """Keeps one SDK session for every plan and frees it when the first plan closes."""

        session_open = True

        def make_plan(self, plan_model, **fields):
            provider = self

            def on_close():
                provider.session_open = False

            return super().make_plan(plan_model, on_close=on_close, **fields)

        def compute(self, model, args, kwargs):
            if not self.session_open:
                raise RuntimeError("session closed")
            return model(*args, **kwargs)

    _passes_the_gate_but_not(
        SharedSession, "test_build_and_close_twice", RuntimeError, "session closed", tmp_path
    )


# ----------------------------------------------------------------- plan values


def test_artifacts_outside_the_plan_directory_fail(tmp_path):
    class WritesBesideItsDirectory(GoodProvider):
        def build(self, model, context):
            plan = super().build(model, context)
            stray = context.artifact_dir / "weights.json"
            stray.write_text("{}")
            plan.artifacts = {"weights": stray}
            return plan

    _gate_check_fails(WritesBesideItsDirectory, r"outside the plan's directory", tmp_path)


def test_a_plan_in_another_precision_than_its_provider_declares_fails(tmp_path):
    class Bf16Plan(GoodProvider):
        def make_plan(self, plan_model, **fields):
            return super().make_plan(plan_model, **{**fields, "precision": Precision.BF16})

    _gate_check_fails(Bf16Plan, r"computes in bf16 but the provider declares fp32", tmp_path)


def test_metadata_that_is_not_strict_json_fails(tmp_path):
    class NanMetadata(GoodProvider):
        def build(self, model, context):
            plan = super().build(model, context)
            plan.metadata = {"compile_ms": float("nan")}
            return plan

    _gate_check_fails(NanMetadata, "metadata is not strict JSON", tmp_path)


def test_a_plan_that_does_not_reload_from_its_saved_artifacts_fails(tmp_path):
    class LoadsFromTheBuildDirectory(GoodProvider):
        """Records where it built and loads from there, not from the directory given."""

        def build(self, model, context):
            plan = super().build(model, context)
            plan.metadata["built_in"] = str(self.plan_dir(context))
            return plan

        def load(self, directory, metadata, context):
            return super().load(Path(metadata["built_in"]), metadata, context)

    with pytest.raises(FileNotFoundError):
        suite(LoadsFromTheBuildDirectory).test_saved_plan_reloads(tmp_path)


def test_a_reloaded_plan_with_wrong_outputs_fails(tmp_path):
    class ReloadsFreshWeights(GoodProvider):
        def load(self, directory, metadata, context):
            return self.make_plan(SmallConvNet().eval(), metadata=metadata)

    with pytest.raises(FAILED, match="validation gate"):
        suite(ReloadsFreshWeights).test_saved_plan_reloads(tmp_path)


def test_declared_save_load_without_a_load_method_fails(tmp_path):
    class NoLoad(GoodProvider):
        load = None  # type: ignore[assignment]

    with pytest.raises(FAILED, match="has no load"):
        suite(NoLoad).test_saved_plan_reloads(tmp_path)
    with pytest.raises(SKIPPED):
        suite(NoLoad, supports_save_load=None).test_saved_plan_reloads(tmp_path / "auto")


# ----------------------------------------------------------------- declarations


def test_a_role_that_is_not_a_role_fails():
    class Baseline(GoodProvider):
        role = "baseline"  # type: ignore[assignment]

    with pytest.raises(FAILED, match="declares role 'baseline'; use one of reference"):
        suite(Baseline).test_declares_name_role_and_precision()


@pytest.mark.parametrize(
    ("precision", "quantization", "message"),
    [
        (Precision.INT8, "static", "use dlopt.plugin.Quantization"),
        (Precision.FP32, Quantization.STATIC, "but computes in fp32"),
    ],
)
def test_a_quantization_declaration_must_be_a_scheme_of_an_integer_plan(
    precision, quantization, message
):
    class Declares(GoodProvider):
        pass

    Declares.precision = precision
    Declares.quantization = quantization
    with pytest.raises(FAILED, match=message):
        suite(Declares).test_declares_name_role_and_precision()
    Declares.precision, Declares.quantization = Precision.INT8, Quantization.STATIC
    suite(Declares).test_declares_name_role_and_precision()


def test_a_plan_name_that_is_a_path_fails():
    class PathName(GoodProvider):
        name = "../npu"

    with pytest.raises(FAILED, match="not a plain name"):
        suite(PathName).test_declares_name_role_and_precision()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            attrs.make_class(
                "NoDefault", {"level": attrs.field(metadata={"help": "x"})}, frozen=True
            ),
            "has no default",
        ),
        (attrs.make_class("NoHelp", {"level": attrs.field(default=1)}, frozen=True), "has no help"),
        (
            attrs.make_class("Mutable", {"level": attrs.field(default=1, metadata={"help": "x"})}),
            "must be frozen",
        ),
        (dict, "must be an attrs class"),
    ],
)
def test_options_without_defaults_help_or_frozenness_fail(options, message):
    class WithOptions(GoodProvider):
        options_type = options

    with pytest.raises(FAILED, match=message):
        suite(WithOptions).test_options_are_attrs_with_defaults_and_help()


# ----------------------------------------------------------------- entry points


def _ep(name: str, distribution: str | None) -> Any:
    dist = types.SimpleNamespace(metadata={"Name": distribution}) if distribution else None
    return types.SimpleNamespace(name=name, value="npu_plugin.plugin", dist=dist)


def test_two_distributions_claiming_one_entry_point_name_fail_clearly():
    eps = [_ep("npu", "dlopt-npu"), _ep("npu", "acme-npu")]
    with pytest.raises(FAILED, match=r"'npu' is claimed by 2 distributions: acme-npu, dlopt-npu"):
        check_entry_point_claims("npu", "dlopt-npu", eps)


def test_one_distribution_seen_twice_is_one_claim():
    ep = _ep("npu", "dlopt-npu")
    assert check_entry_point_claims("npu", "dlopt-npu", [ep, _ep("npu", "dlopt_npu")]) is ep


@pytest.mark.parametrize(
    ("eps", "message"),
    [
        ([], "no 'dlopt.providers' entry point named 'npu'"),
        ([_ep("npu", "other")], "comes from other"),
    ],
)
def test_a_missing_or_foreign_entry_point_fails(eps, message):
    with pytest.raises(FAILED, match=message):
        check_entry_point_claims("npu", "dlopt-npu", eps)


def test_the_suite_refuses_a_duplicated_entry_point_name(monkeypatch):
    import dlopt.testing.provider_suite as contract

    eps = [_ep("npu", "dlopt-core"), _ep("npu", "acme-npu")]
    fake = types.SimpleNamespace(
        entry_points=lambda group, name: [e for e in eps if e.name == name]
    )
    monkeypatch.setattr(contract, "importlib_metadata", fake)
    instance = suite(GoodProvider, entry_point="npu")
    for check in (
        instance.test_distribution_installed_and_registers_entry_point,
        instance.test_plugin_declares_compatible_api_version,
    ):
        with pytest.raises(FAILED, match="claimed by 2 distributions: acme-npu, dlopt-core"):
            check()


# ----------------------------------------------------------------- asynchronous runners


class Asynchronous(GoodProvider):
    """An asynchronous runner: a call enqueues, the outputs are written by synchronize()."""

    def make_plan(self, plan_model, **fields):
        queue: list[tuple[torch.Tensor, torch.Tensor]] = []

        def runner(*args, **kwargs):
            result = plan_model(*args, **kwargs)
            out = torch.full_like(result, float("nan"))  # not computed yet
            queue.append((out, result))
            return out

        def synchronize():
            while queue:
                out, result = queue.pop()
                out.copy_(result)

        return BuiltPlan(runner=runner, synchronize=synchronize, **fields)


def test_an_asynchronous_runner_with_its_synchronize_passes(tmp_path):
    checks = ("test_build_serves_every_case_through_the_gate", "test_build_and_close_twice")
    run_checks(suite(Asynchronous), tmp_path, checks)


def test_an_asynchronous_runner_without_synchronize_fails(tmp_path):
    class NoSynchronize(Asynchronous):
        def make_plan(self, plan_model, **fields):
            plan = super().make_plan(plan_model, **fields)
            plan.synchronize = None
            return plan

    _gate_check_fails(NoSynchronize, "non-finite", tmp_path)


@pytest.mark.parametrize("reading", [float("nan"), -1.0, "12 MiB"])
def test_a_device_memory_reading_that_is_not_mib_fails(tmp_path, reading):
    class BadReading(GoodProvider):
        def make_plan(self, plan_model, **fields):
            return super().make_plan(plan_model, device_memory_mb=lambda: reading, **fields)

    _gate_check_fails(BadReading, r"device_memory_mb\(\) returned", tmp_path)


def test_a_device_memory_reading_in_mib_passes(tmp_path):
    class Reading(GoodProvider):
        def make_plan(self, plan_model, **fields):
            return super().make_plan(plan_model, device_memory_mb=lambda: 12.5, **fields)

    suite(Reading).test_build_serves_every_case_through_the_gate(tmp_path)


def test_a_plugin_importing_deep_core_modules_is_caught(tmp_path, monkeypatch):
    from dlopt.testing.provider_suite import deep_core_imports

    package = tmp_path / "deep_npu_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("from dlopt.plugin import hookimpl\n")
    (package / "provider.py").write_text(
        "import torch\n"
        "from dlopt.contract.provider import BuiltPlan\n"
        "from dlopt import hookimpl\n"
        "import dlopt.testing.fakes\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert deep_core_imports("deep_npu_plugin") == [
        "provider.py:2 imports dlopt.contract.provider",
        "provider.py:3 imports dlopt.hookimpl",
    ]


# ----------------------------------------------------------------- serving declarations


class SharedBuffer(GoodProvider):
    """Declares concurrent calls, but keeps each call's output in one shared buffer: two
    threads at once read each other's results."""

    def make_plan(self, plan_model, **fields):
        fields["serving"] = ServingTraits(concurrency=Concurrency.CONCURRENT)
        return super().make_plan(plan_model, **fields)

    def compute(self, model, args, kwargs):
        self.buffer = model(*args, **kwargs)
        time.sleep(0.002)  # another thread's call lands here
        return self.buffer


def test_a_plan_that_lies_about_concurrent_calls_fails(tmp_path):
    _passes_the_gate_but_not(
        SharedBuffer,
        "test_declared_concurrency_holds",
        FAILED,
        "declares concurrent concurrency, but called from 4 threads at once",
        tmp_path,
    )


def test_a_plan_safe_to_call_concurrently_passes_and_a_serialized_one_is_not_called_so(tmp_path):
    class Concurrent(GoodProvider):
        def make_plan(self, plan_model, **fields):
            fields["serving"] = EAGER_SERVING
            return super().make_plan(plan_model, **fields)

    suite(Concurrent).test_declared_concurrency_holds(tmp_path / "a")
    suite(Concurrent).test_declared_any_grad_mode_holds(tmp_path / "b")
    with pytest.raises(SKIPPED, match="serialized"):
        suite(GoodProvider).test_declared_concurrency_holds(tmp_path / "c")


def test_a_plan_that_lies_about_serving_any_grad_mode_fails(tmp_path):
    class InferenceOnly(GoodProvider):
        def make_plan(self, plan_model, **fields):
            fields["serving"] = ServingTraits(any_grad_mode=True)
            return super().make_plan(plan_model, **fields)

        def compute(self, model, args, kwargs):
            if not torch.is_inference_mode_enabled():
                raise RuntimeError("this runtime only runs inside inference mode")
            return model(*args, **kwargs)

    _passes_the_gate_but_not(
        InferenceOnly,
        "test_declared_any_grad_mode_holds",
        FAILED,
        "declares any_grad_mode but raised under no_grad",
        tmp_path,
    )
