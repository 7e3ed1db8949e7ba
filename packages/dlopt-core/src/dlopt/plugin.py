"""Everything a provider author imports, in one module (plugin API 2.1).

A provider distribution imports from ``dlopt.plugin`` only; the rest of ``dlopt`` may
move between releases, this module's names do not (they only grow). A plugin module::

    from dlopt.plugin import (
        BuiltPlan, Precision, Provider, ProviderAvailability, ProviderContext, hookimpl,
    )

    DLOPT_PLUGIN_API_VERSION = "2.1"  # the literal version this plugin was written for


    class MyNpuProvider(Provider):
        name = "mynpu_int8"
        precision = Precision.INT8

        def availability(self, context): ...
        def build(self, model, context) -> BuiltPlan: ...


    @hookimpl
    def dlopt_register_providers(register):
        register(MyNpuProvider())

Which dlopt-core releases implement which plugin API: dlopt-core 0.1.x implements 1.0,
0.2.x implements 2.0, 0.3.x implements 2.1 (2.0 plus ``BuiltPlan.serving``,
``BuiltPlan.thread_runner``, the optional ``prior(context) -> Prior | None`` and the
optional ``quantization`` declaration, a :class:`Quantization`;
require ``dlopt-core>=0.3,<0.4`` for 2.1). Names only added since (a plugin that uses
them needs the dlopt-core release that added them): ``watch_value_dependence``,
``refuse_value_dependence``, ``check_value_independence``, ``ValueWatch`` and ``ValueDependentGraph`` (a plan made by
tracing or export refuses a graph that depends on input values); ``scoped_environment``
(environment variables set for a block and put back after it).
"""

from __future__ import annotations

from dlopt.contract.graph_capture import (
    ValueWatch,
    check_value_independence,
    refuse_value_dependence,
    watch_value_dependence,
)
from dlopt.contract.hooks import hookimpl
from dlopt.contract.priors import OperatorMix, Prior
from dlopt.contract.provider import (
    EAGER_SERVING,
    PLUGIN_API_VERSION,
    BuiltPlan,
    PreparedCase,
    Provider,
    ProviderAvailability,
    ProviderContext,
    ProviderProtocol,
    Register,
    Reload,
    Role,
    ServingTraits,
)
from dlopt.errors import (
    ConfigurationError,
    DloptError,
    PlanNotApplicable,
    ProviderBuildError,
    ValueDependentGraph,
    WorkloadError,
)
from dlopt.platform.arrays import NUMPY_DTYPES, numpy_view
from dlopt.platform.config_checks import one_of
from dlopt.platform.fileio import atomic_write_bytes
from dlopt.platform.machine import cpu_flags, cpu_info
from dlopt.platform.names import is_plain_name
from dlopt.platform.npz import read_npz
from dlopt.platform.probing import (
    CapturedOutput,
    base_version,
    capture_output,
    check_distribution,
    cuda_bf16_native,
    distribution_version,
    find_cxx_compiler,
    strip_ansi,
    try_import,
    version_satisfies,
)
from dlopt.platform.processes import scoped_environment
from dlopt.platform.retired import retired_names
from dlopt.platform.serialization import atomic_write_text, strict_jsonable
from dlopt.platform.tree import iter_tensors, map_tensors
from dlopt.precision import Precision, Quantization
from dlopt.settings.target import ExecutionTarget
from dlopt.settings.workload import WorkloadCase, WorkloadProfile
from dlopt.vocabulary import Concurrency, TextEnum

__all__ = [
    "EAGER_SERVING",
    "NUMPY_DTYPES",
    "PLUGIN_API_VERSION",
    "BuiltPlan",
    "CapturedOutput",
    "Concurrency",
    "ConfigurationError",
    "DloptError",
    "ProviderProtocol",
    "ExecutionTarget",
    "OperatorMix",
    "PlanNotApplicable",
    "Precision",
    "PreparedCase",
    "Prior",
    "Provider",
    "ProviderAvailability",
    "ProviderBuildError",
    "ProviderContext",
    "Quantization",
    "Register",
    "Reload",
    "Role",
    "ServingTraits",
    "TextEnum",
    "ValueDependentGraph",
    "ValueWatch",
    "WorkloadCase",
    "WorkloadError",
    "WorkloadProfile",
    "atomic_write_bytes",
    "atomic_write_text",
    "base_version",
    "capture_output",
    "check_value_independence",
    "check_distribution",
    "cpu_flags",
    "cpu_info",
    "cuda_bf16_native",
    "distribution_version",
    "find_cxx_compiler",
    "hookimpl",
    "is_plain_name",
    "iter_tensors",
    "map_tensors",
    "numpy_view",
    "one_of",
    "scoped_environment",
    "read_npz",
    "refuse_value_dependence",
    "strict_jsonable",
    "strip_ansi",
    "try_import",
    "version_satisfies",
    "watch_value_dependence",
]

#: Names this module had before the glossary gave each concept one word.
__getattr__ = retired_names(
    __name__, {"ExecutionProvider": "ProviderProtocol", "Comeback": "Reload"}, globals()
)
