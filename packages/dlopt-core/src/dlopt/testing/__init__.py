"""Test helpers shipped with dlopt-core: the provider contract suite and fake providers.

A third-party provider (a private NPU SDK, say) runs the same checks as dlopt's own::

    from dlopt.testing import ProviderContractSuite

    class TestMyNpuContract(ProviderContractSuite):
        distribution = "dlopt-mynpu"
        entry_point = "mynpu"
        heavy_modules = ("mynpu_sdk",)

        def make_provider(self):
            return MyNpuProvider()

The contract suite (:mod:`dlopt.testing.provider_suite`, :mod:`dlopt.testing.fixtures`) needs
pytest; it is imported only when ``ProviderContractSuite`` is first asked for. The fakes
(:mod:`dlopt.testing.fakes`), the fake-clock race (:mod:`dlopt.testing.fake_race`), the
context a race hands a provider's build (:mod:`dlopt.testing.contexts`), the simulated
machine (:mod:`dlopt.testing.simulation`), the in-process plugin modules
(:mod:`dlopt.testing.plugins`), the small models (:mod:`dlopt.testing.models`), the
fresh-process script runner (:mod:`dlopt.testing.fresh_process`) and the peers'
back-to-back protocol, for comparison (:mod:`dlopt.testing.back_to_back`) import without
pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlopt.testing.fakes import FailingStage, FakeProvider

if TYPE_CHECKING:
    from dlopt.testing.provider_suite import (
        REQUIRE_AVAILABLE_ENV,
        BuildSetup,
        ProviderContractSuite,
        check_entry_point_claims,
    )

__all__ = [
    "REQUIRE_AVAILABLE_ENV",
    "BuildSetup",
    "FailingStage",
    "FakeProvider",
    "ProviderContractSuite",
    "check_entry_point_claims",
]

_FROM_SUITE = {
    "REQUIRE_AVAILABLE_ENV",
    "BuildSetup",
    "ProviderContractSuite",
    "check_entry_point_claims",
}


def __getattr__(name: str) -> Any:
    # The suite imports pytest: load it on first use, so the fakes work without pytest.
    if name in _FROM_SUITE:
        try:
            from dlopt.testing import provider_suite
        except ImportError as exc:
            if exc.name != "pytest":
                raise
            raise ImportError(
                f"dlopt.testing.{name} is part of the provider contract suite, which runs "
                "under pytest: pip install pytest (the fakes in dlopt.testing need no pytest)",
                name="pytest",
            ) from exc
        return getattr(provider_suite, name)
    raise AttributeError(f"module 'dlopt.testing' has no attribute {name!r}")
