"""The public names retired in 0.3.0 still work, and each says what replaced it."""

from __future__ import annotations

import importlib
import sys

import pytest

import dlopt
import dlopt.plugin
from dlopt.plugin import Provider, ProviderAvailability, ProviderContext, ProviderProtocol, Reload


@pytest.mark.parametrize("module", [dlopt, dlopt.plugin], ids=["dlopt", "dlopt.plugin"])
def test_the_protocols_old_name_is_the_new_one_with_a_warning(module) -> None:
    with pytest.warns(
        DeprecationWarning, match="ExecutionProvider is deprecated: use .*ProviderProtocol"
    ):
        assert module.ExecutionProvider is ProviderProtocol


def test_comeback_is_reload_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="Comeback is deprecated"):
        assert dlopt.plugin.Comeback is Reload


def test_a_provider_declaring_comes_back_is_read_with_a_warning() -> None:
    class Old:
        name = "old"
        comes_back = "rebuild_with_compile_cache"

    with pytest.warns(DeprecationWarning, match="declares comes_back.*reloads_by"):
        assert Reload.of(Old()) is Reload.REBUILD_WITH_COMPILE_CACHE


def test_a_provider_implementing_check_still_probes_with_a_warning() -> None:
    class Old(Provider):
        name = "old_plan"

        def check(self, context):
            return ProviderAvailability.unavailable("old SDK missing")

    with pytest.warns(DeprecationWarning, match="implements check.*availability"):
        answer = Old().probe(ProviderContext())
    assert answer.available is False and answer.reason == "old SDK missing"


def test_importing_dlopt_hookspecs_warns_and_still_gives_hookimpl() -> None:
    sys.modules.pop("dlopt.hookspecs", None)
    with pytest.warns(DeprecationWarning, match="dlopt.hookspecs is deprecated"):
        old = importlib.import_module("dlopt.hookspecs")
    assert old.hookimpl is dlopt.plugin.hookimpl


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        _ = dlopt.plugin.NoSuchThing
