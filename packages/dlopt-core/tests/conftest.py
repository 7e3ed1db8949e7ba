"""Shared fixtures: end-to-end selections with fake providers on a fake clock (exact, instant)."""

from dlopt.testing.fixtures import race, x  # noqa: F401
