"""dlopt plugin entry point: registers the fx and TorchInductor plans.

Loading this module imports torch (and ``torch.fx``, which torch loads anyway) but not
``torch._dynamo`` or ``torch._inductor``; those are imported when a plan is built.
"""

from __future__ import annotations

from typing import Any

from dlopt.plugin import hookimpl

#: The plugin API this module was written for (a literal: it is checked against core's).
DLOPT_PLUGIN_API_VERSION = "2.1"


@hookimpl
def dlopt_register_providers(register: Any) -> None:
    from dlopt_fx.providers import default_providers

    for provider in default_providers():
        register(provider)
