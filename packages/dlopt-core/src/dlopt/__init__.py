"""dlopt: pick the fastest validated inference plan for a PyTorch model.

Public names are imported lazily so that ``import dlopt`` stays cheap (no torch, no SDK)
until something is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dlopt._version import __version__
from dlopt.hookspecs import hookimpl
from dlopt.providers.contract import PLUGIN_API_VERSION

_LAZY: dict[str, str] = {
    # contract
    "BuiltPlan": "dlopt.providers.contract",
    "ExecutionProvider": "dlopt.providers.contract",
    "ProviderAvailability": "dlopt.providers.contract",
    "ProviderContext": "dlopt.providers.contract",
    "Precision": "dlopt.precision",
    "ExecutionTarget": "dlopt.target",
    "WorkloadCase": "dlopt.workload",
    "WorkloadProfile": "dlopt.workload",
    "Event": "dlopt.events",
    "EventKind": "dlopt.events",
    "load_providers": "dlopt.providers.loader",
    "PluginSettings": "dlopt.providers.loader",
    "inspect_runtime": "dlopt.runtime",
    "RuntimeInfo": "dlopt.runtime",
    # policy and pipeline
    "OptimizationPolicy": "dlopt.policy",
    "DeploymentConstraints": "dlopt.policy",
    "MeasurementPolicy": "dlopt.measurement",
    "QualityPolicy": "dlopt.validation",
    "QualityLimits": "dlopt.validation",
    "InferenceOptimizer": "dlopt.optimizer",
    "OptimizationDecision": "dlopt.decision",
    "OptimizationReport": "dlopt.report",
    "load_report": "dlopt.report",
    # bundles
    "Bundle": "dlopt.bundle",
    "BundleError": "dlopt.bundle",
    "BundleLoadError": "dlopt.bundle",
    "load_bundle": "dlopt.serving",
    "verify_bundle": "dlopt.bundle",
    # agents and cancellation
    "OptimizationAgentToolkit": "dlopt.agents",
    "ToolkitLimits": "dlopt.agents",
    "SelectionCancelled": "dlopt.errors",
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
    from dlopt.bundle import Bundle, BundleError, BundleLoadError, verify_bundle
    from dlopt.decision import OptimizationDecision
    from dlopt.errors import SelectionCancelled
    from dlopt.events import Event, EventKind
    from dlopt.measurement import MeasurementPolicy
    from dlopt.optimizer import InferenceOptimizer
    from dlopt.policy import DeploymentConstraints, OptimizationPolicy
    from dlopt.precision import Precision
    from dlopt.providers.contract import (
        BuiltPlan,
        ExecutionProvider,
        ProviderAvailability,
        ProviderContext,
    )
    from dlopt.providers.loader import PluginSettings, load_providers
    from dlopt.report import OptimizationReport, load_report
    from dlopt.runtime import RuntimeInfo, inspect_runtime
    from dlopt.serving import load_bundle
    from dlopt.target import ExecutionTarget
    from dlopt.validation import QualityLimits, QualityPolicy
    from dlopt.workload import WorkloadCase, WorkloadProfile
