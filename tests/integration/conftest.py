"""Cross-distribution tests: real providers installed together (the ``tests`` nox session)."""

from dlopt.testing.fixtures import race, x  # noqa: F401
