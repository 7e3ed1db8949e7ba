"""dlopt-fx: dlopt plans that rewrite (``torch.fx``) or compile (TorchInductor) the graph.

Plans: ``fx``, ``fx_inductor``, ``inductor``, ``inductor_freezing``,
``inductor_channels_last_freezing``, the bf16 plans ``inductor_bf16[_channels_last][_freezing]``
and ``inductor_max_autotune``. Import stays light: names load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "FxProvider": "dlopt_fx.providers",
    "InductorProvider": "dlopt_fx.providers",
    "InductorOptions": "dlopt_fx.providers",
    "default_providers": "dlopt_fx.providers",
    "build_fx_graph": "dlopt_fx.providers",
    "simplify": "dlopt_fx.rewrites",
    "trace": "dlopt_fx.rewrites",
    "RewriteReport": "dlopt_fx.rewrites",
    "FxTraceError": "dlopt_fx.rewrites",
    "REWRITES": "dlopt_fx.rewrites",
    "inductor_cache_scope": "dlopt_fx.compiled",
    "plan_cache_dir": "dlopt_fx.compiled",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dlopt_fx' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
