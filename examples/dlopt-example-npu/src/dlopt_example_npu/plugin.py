"""The module the ``dlopt.providers`` entry point names: it registers the example's plans.

Loading it imports nothing heavy: neither the tinynpu SDK nor the provider module, which
are imported when dlopt asks for the plans.
"""

from __future__ import annotations

from dlopt.plugin import Register, hookimpl

#: The plugin API this module was written for: a literal, checked against dlopt-core's.
DLOPT_PLUGIN_API_VERSION = "2.1"


@hookimpl
def dlopt_register_providers(register: Register) -> None:
    """One ``register`` call per plan."""
    from dlopt_example_npu.provider import ExampleNpuFastProvider, ExampleNpuProvider

    register(ExampleNpuProvider())
    register(ExampleNpuFastProvider())
