"""TorchAO quantization plans for dlopt (``torchao_int8_dynamic``, ``torchao_int8_weight_only``,
``torchao_int4_weight_only``, ``torchao_fp8``, each also ``..._inductor``, compiled; and
``torchao_pt2e_int8_static``, static int8 through PT2E).

torchao itself is imported only when a plan is probed or built.
"""

from __future__ import annotations

from dlopt_torchao.compat import Compatibility, check_torch_pairing, recommended_torchao
from dlopt_torchao.plans import all_providers
from dlopt_torchao.provider import TorchAOInt4Options, TorchAOOptions, TorchAOProvider
from dlopt_torchao.pt2e import PT2EOptions, PT2EStaticInt8Provider
from dlopt_torchao.schemes import Scheme

__all__ = [
    "Compatibility",
    "PT2EOptions",
    "PT2EStaticInt8Provider",
    "Scheme",
    "TorchAOInt4Options",
    "TorchAOOptions",
    "TorchAOProvider",
    "all_providers",
    "check_torch_pairing",
    "recommended_torchao",
]
