"""Every plan dlopt-torchao offers, in the order ``dlopt providers`` lists them."""

from __future__ import annotations

from dlopt.plugin import Provider
from dlopt_torchao.provider import TorchAOProvider
from dlopt_torchao.pt2e import PT2EStaticInt8Provider
from dlopt_torchao.schemes import Scheme


def all_providers() -> list[Provider]:
    """Every scheme eager and compiled, and static int8 through PT2E; probes drop what
    this machine cannot run or what dlopt does not offer on it by default (see
    :func:`not_offered_by_default`)."""
    schemes: list[Provider] = [
        TorchAOProvider(scheme, compiled) for scheme in Scheme for compiled in (False, True)
    ]
    return [*schemes, PT2EStaticInt8Provider()]
