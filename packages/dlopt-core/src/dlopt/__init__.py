"""dlopt: pick the fastest validated inference plan for a PyTorch model.

Public names are imported lazily so that ``import dlopt`` stays cheap (no torch, no SDK)
until something is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dlopt._version import __version__
from dlopt.plugins.contract import PLUGIN_API_VERSION
from dlopt.plugins.hookspecs import hookimpl

_LAZY: dict[str, str] = {
    # contract
    "BuiltPlan": "dlopt.plugins.contract",
    "ExecutionProvider": "dlopt.plugins.contract",
    "ProviderAvailability": "dlopt.plugins.contract",
    "ProviderContext": "dlopt.plugins.contract",
    "Precision": "dlopt.precision",
    "ExecutionTarget": "dlopt.api.target",
    "WorkloadCase": "dlopt.api.workload",
    "WorkloadProfile": "dlopt.api.workload",
    "Event": "dlopt.events",
    "EventKind": "dlopt.events",
    "load_providers": "dlopt.plugins.discovery",
    "PluginSettings": "dlopt.plugins.discovery",
    "inspect_runtime": "dlopt.evidence.provenance",
    "RuntimeInfo": "dlopt.evidence.provenance",
    # policy and pipeline
    "OptimizationPolicy": "dlopt.api.policy",
    "DeploymentConstraints": "dlopt.api.policy",
    "MeasurementPolicy": "dlopt.measurement",
    "QualityPolicy": "dlopt.validation",
    "QualityLimits": "dlopt.validation",
    "InferenceOptimizer": "dlopt.api.optimizer",
    "OptimizationDecision": "dlopt.api.decision",
    "OptimizationReport": "dlopt.evidence.report",
    "load_report": "dlopt.evidence.report",
    # bundles
    "Bundle": "dlopt.bundle.store",
    "BundleError": "dlopt.bundle.store",
    "BundleLoadError": "dlopt.bundle.store",
    "load_bundle": "dlopt.bundle.serve",
    "verify_bundle": "dlopt.bundle.store",
    # agents and cancellation
    "OptimizationAgentToolkit": "dlopt.agents",
    "ToolkitLimits": "dlopt.agents",
    "SelectionCancelled": "dlopt.errors",
    # serving
    "GradMode": "dlopt.vocabulary",
    "ServingTraits": "dlopt.plugins.contract",
    "ServingError": "dlopt.errors",
    "ServingContextError": "dlopt.errors",
    "UnseenSignatureError": "dlopt.errors",
}

__all__ = ["PLUGIN_API_VERSION", "__version__", "hookimpl", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dlopt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from dlopt.agents import OptimizationAgentToolkit, ToolkitLimits
    from dlopt.api.decision import OptimizationDecision
    from dlopt.api.optimizer import InferenceOptimizer
    from dlopt.api.policy import DeploymentConstraints, OptimizationPolicy
    from dlopt.api.target import ExecutionTarget
    from dlopt.api.workload import WorkloadCase, WorkloadProfile
    from dlopt.bundle.serve import load_bundle
    from dlopt.bundle.store import Bundle, BundleError, BundleLoadError, verify_bundle
    from dlopt.errors import (
        SelectionCancelled,
        ServingContextError,
        ServingError,
        UnseenSignatureError,
    )
    from dlopt.events import Event, EventKind
    from dlopt.evidence.provenance import RuntimeInfo, inspect_runtime
    from dlopt.evidence.report import OptimizationReport, load_report
    from dlopt.measurement import MeasurementPolicy
    from dlopt.plugins.contract import (
        BuiltPlan,
        ExecutionProvider,
        ProviderAvailability,
        ProviderContext,
        ServingTraits,
    )
    from dlopt.plugins.discovery import PluginSettings, load_providers
    from dlopt.precision import Precision
    from dlopt.validation import QualityLimits, QualityPolicy
    from dlopt.vocabulary import GradMode
