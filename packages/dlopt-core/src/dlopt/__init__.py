"""dlopt: pick the fastest validated inference plan for a PyTorch model.

Public names are imported lazily so that ``import dlopt`` stays cheap (no torch, no SDK)
until something is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dlopt._version import __version__
from dlopt.contract.hooks import hookimpl
from dlopt.contract.provider import PLUGIN_API_VERSION

_LAZY: dict[str, str] = {
    # contract
    "BuiltPlan": "dlopt.contract.provider",
    "ProviderProtocol": "dlopt.contract.provider",
    "ProviderAvailability": "dlopt.contract.provider",
    "ProviderContext": "dlopt.contract.provider",
    "Precision": "dlopt.precision",
    "ExecutionTarget": "dlopt.settings.target",
    "WorkloadCase": "dlopt.settings.workload",
    "WorkloadProfile": "dlopt.settings.workload",
    "Event": "dlopt.events",
    "EventKind": "dlopt.events",
    "load_providers": "dlopt.plugins.discovery",
    "PluginSettings": "dlopt.plugins.discovery",
    "inspect_runtime": "dlopt.evidence.provenance",
    "RuntimeInfo": "dlopt.evidence.provenance",
    # policy and pipeline
    "OptimizationPolicy": "dlopt.settings.policy",
    "DeploymentConstraints": "dlopt.settings.policy",
    "MeasurementPolicy": "dlopt.measurement",
    "QualityPolicy": "dlopt.validation",
    "QualityLimits": "dlopt.validation",
    "InferenceOptimizer": "dlopt.api.optimizer",
    "OptimizationDecision": "dlopt.engine.decision",
    "OptimizationReport": "dlopt.evidence.report",
    "load_report": "dlopt.evidence.report",
    # bundles
    "Bundle": "dlopt.bundle.store",
    "BundleError": "dlopt.bundle.store",
    "BundleLoadError": "dlopt.bundle.store",
    "load_bundle": "dlopt.api.bundles",
    "verify_bundle": "dlopt.bundle.store",
    # agents and cancellation
    "OptimizationAgentToolkit": "dlopt.agents",
    "ToolkitLimits": "dlopt.agents",
    "SelectionCancelled": "dlopt.errors",
    # serving
    "GradMode": "dlopt.vocabulary",
    "ServingTraits": "dlopt.contract.provider",
    "ServingError": "dlopt.errors",
    "ServingContextError": "dlopt.errors",
    "UnseenSignatureError": "dlopt.errors",
    "NonFiniteInputError": "dlopt.errors",
    "GuardPolicy": "dlopt.settings.guard",
    "HealthRecord": "dlopt.serving.health",
}

__all__ = ["PLUGIN_API_VERSION", "__version__", "hookimpl", *_LAZY]


#: Public names retired when the glossary gave each concept one word: old -> new.
_RETIRED = {"ExecutionProvider": "ProviderProtocol"}


def __getattr__(name: str) -> Any:
    if name in _RETIRED:
        import warnings

        warnings.warn(
            f"dlopt.{name} is deprecated: use dlopt.{_RETIRED[name]} (see CHANGELOG.md)",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(_RETIRED[name])
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dlopt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from dlopt.agents import OptimizationAgentToolkit, ToolkitLimits
    from dlopt.api.bundles import load_bundle
    from dlopt.api.optimizer import InferenceOptimizer
    from dlopt.bundle.store import Bundle, BundleError, BundleLoadError, verify_bundle
    from dlopt.contract.provider import (
        BuiltPlan,
        ProviderAvailability,
        ProviderContext,
        ProviderProtocol,
        ServingTraits,
    )
    from dlopt.engine.decision import OptimizationDecision
    from dlopt.errors import (
        NonFiniteInputError,
        SelectionCancelled,
        ServingContextError,
        ServingError,
        UnseenSignatureError,
    )
    from dlopt.events import Event, EventKind
    from dlopt.evidence.provenance import RuntimeInfo, inspect_runtime
    from dlopt.evidence.report import OptimizationReport, load_report
    from dlopt.measurement import MeasurementPolicy
    from dlopt.plugins.discovery import PluginSettings, load_providers
    from dlopt.precision import Precision
    from dlopt.serving.health import HealthRecord
    from dlopt.settings.guard import GuardPolicy
    from dlopt.settings.policy import DeploymentConstraints, OptimizationPolicy
    from dlopt.settings.target import ExecutionTarget
    from dlopt.settings.workload import WorkloadCase, WorkloadProfile
    from dlopt.validation import QualityLimits, QualityPolicy
    from dlopt.vocabulary import GradMode
