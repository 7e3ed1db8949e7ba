"""Fault class: values a plugin hands in (availability, metadata, artifacts) that are not JSON.

Non-finite numbers become null, other non-JSON values their string form, and a plugin
whose values cannot be normalised at all is reported (unavailable / build rejection),
never fatal to ``dlopt providers``, ``dlopt inspect`` or a race's evidence.
"""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path

import attrs
import pytest
import torch

from dlopt.cli import main
from dlopt.contract.provider import (
    BuiltPlan,
    ProviderAvailability,
    ProviderContext,
    ProviderInfo,
)
from dlopt.errors import ProviderBuildError
from dlopt.pipeline.probe import probe_provider
from dlopt.platform.serialization import strict_jsonable
from dlopt.plugins import discovery as loader
from dlopt.plugins.boundary import check_built_plan
from dlopt.plugins.discovery import PluginSettings
from dlopt.precision import Precision
from dlopt.testing.plugins import plugin_module


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    __repr__ = __str__


class _Colour(enum.Enum):
    RED = "red"


@attrs.define
class _OddProvider:
    """A provider whose probe hands back whatever the test asks for."""

    name: str
    availability: object
    precision: Precision = Precision.FP32

    def probe(self, context):
        return self.availability

    def build(self, model, context):
        return BuiltPlan(model)


@pytest.fixture
def odd_plugin_installed(monkeypatch):
    """Every ``load_providers()`` (the CLI's too) also sees the odd plugin's providers."""
    real = loader.load_providers
    providers = [
        _OddProvider("nan_sdk", ProviderAvailability(True, sdk_versions={"sdk": math.nan})),
        _OddProvider(
            "odd_details",
            ProviderAvailability(
                True,
                reason=_Colour.RED,
                sdk_versions={1: 2.5, "inf": math.inf},
                details={"nested": {"x": [math.nan, _Colour.RED]}},
            ),
        ),
        _OddProvider("unprintable", ProviderAvailability(True, details={"k": _Unprintable()})),
        _OddProvider("not_an_availability", {"available": True}),
        _OddProvider("truthy_string", ProviderAvailability("no")),
    ]

    def load_with_odd_plugin(settings=None, **kwargs):
        extra = [
            *kwargs.pop("extra_plugins", ()),
            ("odd_plugin", plugin_module("odd_plugin", *providers)),
        ]
        return real(settings or PluginSettings(autoload=False), extra_plugins=extra, **kwargs)

    monkeypatch.setattr(loader, "load_providers", load_with_odd_plugin)
    return providers


def _status(name: str, data: dict) -> dict:
    return next(p for p in data["providers"] if p["name"] == name)


def test_providers_json_survives_non_finite_and_odd_values(odd_plugin_installed, capsys):
    assert main(["providers", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    nan_sdk = _status("nan_sdk", data)
    assert nan_sdk["availability"]["available"] is True
    assert nan_sdk["availability"]["sdk_versions"] == {"sdk": None}
    odd = _status("odd_details", data)["availability"]
    assert odd["reason"] == "red" or "RED" in odd["reason"]
    assert odd["sdk_versions"] == {"1": "2.5", "inf": None}
    assert odd["details"] == {"nested": {"x": [None, str(_Colour.RED)]}}
    unprintable = _status("unprintable", data)["availability"]
    assert unprintable["available"] is False and "odd_plugin" in unprintable["reason"]
    wrong_type = _status("not_an_availability", data)["availability"]
    assert wrong_type["available"] is False and "ProviderAvailability" in wrong_type["reason"]
    truthy = _status("truthy_string", data)["availability"]
    assert truthy["available"] is False and "'no'" in truthy["reason"]


def test_providers_table_survives_odd_values(odd_plugin_installed, capsys):
    assert main(["providers"]) == 0
    assert "nan_sdk" in capsys.readouterr().out


def test_inspect_json_survives_a_nan_sdk_version(odd_plugin_installed, capsys):
    assert main(["inspect", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    record = next(p for p in data["providers"] if p["name"] == "nan_sdk")
    assert record["sdk_versions"] == {"sdk": None}


def test_probe_provider_normalises_at_the_boundary():
    info = ProviderInfo(
        _OddProvider("p", ProviderAvailability(True, sdk_versions={"sdk": math.nan})), "plug"
    )
    status = probe_provider(info, ProviderContext())
    assert status.availability.available and status.availability.sdk_versions == {"sdk": None}


def test_strict_jsonable_walks_and_normalises():
    value = {
        1: math.nan,
        "t": (1, -math.inf, True, None),
        "n": {"deep": [float("inf"), 2.5, "s"]},
        "p": Path("/x"),
        "e": _Colour.RED,
        "dt": torch.float16,
    }
    out = strict_jsonable(value)
    assert out == {
        "1": None,
        "t": [1, None, True, None],
        "n": {"deep": [None, 2.5, "s"]},
        "p": "/x",
        "e": str(_Colour.RED),
        "dt": "float16",  # a dtype by its name, as dlopt writes precisions
    }
    json.dumps(out, allow_nan=False)
    with pytest.raises(ValueError, match=r"no str for you"):
        strict_jsonable({"k": [_Unprintable()]})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="refers to itself"):
        strict_jsonable(loop)


def _built(tmp_path, **kwargs):
    context = ProviderContext(artifact_dir=tmp_path / "artifacts")
    return context, BuiltPlan(lambda x: x, **kwargs)


def test_check_built_plan_normalises_metadata(tmp_path):
    context, plan = _built(
        tmp_path, metadata={"speed": math.nan, "sizes": (1, 2), 3: {"inf": math.inf}}
    )
    checked = check_built_plan(plan, context, plan_name="odd", plugin="odd_plugin")
    assert checked is plan
    assert plan.metadata == {"speed": None, "sizes": [1, 2], "3": {"inf": None}}


def test_check_built_plan_reports_unnormalisable_metadata(tmp_path):
    context, plan = _built(tmp_path, metadata={"bad": _Unprintable()})
    with pytest.raises(ProviderBuildError, match=r"odd_plugin.*metadata"):
        check_built_plan(plan, context, plan_name="odd", plugin="odd_plugin")


def test_check_built_plan_refuses_a_bad_output_dtype(tmp_path):
    context, plan = _built(tmp_path, output_dtype="half")
    with pytest.raises(ProviderBuildError, match="output_dtype"):
        check_built_plan(plan, context, plan_name="odd", plugin="odd_plugin")


def test_check_built_plan_refuses_metadata_that_is_not_a_dict(tmp_path):
    context, plan = _built(tmp_path)
    plan.metadata = [1, 2]
    with pytest.raises(ProviderBuildError, match="metadata"):
        check_built_plan(plan, context, plan_name="odd", plugin="odd_plugin")


def test_check_built_plan_refuses_what_is_not_a_plan(tmp_path):
    context = ProviderContext(artifact_dir=tmp_path)
    with pytest.raises(ProviderBuildError, match="BuiltPlan"):
        check_built_plan(object(), context, plan_name="odd", plugin="odd_plugin")


def test_a_race_with_non_finite_plan_metadata_still_saves_its_report(race, x, tmp_path):
    import json

    from dlopt.testing.models import StructuredMLP

    class NanMetadata:
        name = "nan_meta"
        precision = "fp32"

        def probe(self, context):
            return ProviderAvailability.ok(sdk_versions={"sdk": float("nan")})

        def build(self, model, context):
            def runner(*args):
                race.clock.advance(1e-3)
                return model(*args)

            return BuiltPlan(
                runner=runner, metadata={"score": float("inf"), "dtype": torch.float16}
            )

    decision = race.optimizer(race.fake("eager_fp32", 3e-3), NanMetadata()).select_signature(
        StructuredMLP(), x
    )
    path = decision.save_report(tmp_path / "report.json")
    saved = json.loads(path.read_text())
    evidence = next(c for c in saved["candidates"] if c["name"] == "nan_meta")
    assert evidence["metadata"] == {"score": None, "dtype": "float16"}
    runtime = next(p for p in saved["runtime"]["providers"] if p["name"] == "nan_meta")
    assert runtime["sdk_versions"] == {"sdk": None}
