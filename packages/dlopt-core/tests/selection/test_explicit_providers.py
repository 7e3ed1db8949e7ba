"""Providers handed to the optimizer (``providers=``) merge into the registry's one way,
for the optimizer and the agent toolkit alike."""

from __future__ import annotations

from dlopt.contract.provider import ProviderInfo
from dlopt.plugins.registry import EXPLICIT_PLUGIN, with_explicit
from dlopt.testing import FakeProvider


def test_explicit_providers_replace_in_place_and_new_ones_come_last():
    registered = [
        ProviderInfo(FakeProvider("a", latency_s=1e-3), plugin="p"),
        ProviderInfo(FakeProvider("b", latency_s=1e-3), plugin="p"),
    ]
    mine_b, mine_c = FakeProvider("b", latency_s=2e-3), FakeProvider("c", latency_s=2e-3)
    merged = with_explicit(registered, [mine_c, mine_b])
    assert [(i.name, i.plugin) for i in merged] == [
        ("a", "p"),
        ("b", EXPLICIT_PLUGIN),
        ("c", EXPLICIT_PLUGIN),
    ]
    assert merged[1].provider is mine_b and merged[0] is registered[0]
