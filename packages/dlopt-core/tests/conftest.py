"""Shared fixtures and Hypothesis settings for core's tests.

Fixtures: end-to-end selections with fake providers on a fake clock (exact, instant).

Hypothesis: explore freshly on a developer's machine, replay a fixed set in CI. A property
test that finds a new counterexample should fail where someone is looking at it, not make
an unrelated CI run red; CI (``CI`` set) therefore derandomizes.
"""

from __future__ import annotations

import os

from hypothesis import settings

from dlopt.testing.fixtures import race, x  # noqa: F401

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
