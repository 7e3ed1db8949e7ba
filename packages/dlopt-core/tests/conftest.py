"""Shared fixtures and Hypothesis settings for core's tests.

Fixtures: end-to-end selections with fake providers on a fake clock (exact, instant);
``forge_npz``, which writes an ``.npz`` whose member's header lies about its bytes;
``select_argv``, the command line of a quick real ``dlopt select``.

Hypothesis: explore freshly on a developer's machine, replay a fixed set in CI. A property
test that finds a new counterexample should fail where someone is looking at it, not make
an unrelated CI run red; CI (``CI`` set) therefore derandomizes.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import settings

from dlopt.testing.fixtures import race, x  # noqa: F401

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def forge_npz() -> Callable[[Path, str, bytes], None]:
    """``forge(path, header_shape, payload)``: an archive whose one float32 member ``x``
    claims ``header_shape`` (a tuple's text) over ``payload``."""

    def forge(path: Path, header_shape: str, payload: bytes) -> None:
        header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {header_shape}, }}"
        header += " " * (63 - (10 + len(header)) % 64) + "\n"
        data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("x.npy", data + payload)

    return forge


@pytest.fixture(scope="session")
def select_argv() -> Callable[..., list[str]]:
    """``select_argv(*cases, extra=())``: ``dlopt select`` of the small StructuredMLP on
    ``cases`` (``"b1=1x16@70"``), with ``native_channels_last`` included (rejected at build:
    it needs image inputs, so the race is quick), every included plan built whatever its
    prior (``--all-plans``) and a 1 s race budget, then ``extra``."""

    def argv(*cases: str, extra: Sequence[str] = ()) -> list[str]:
        case_options = [option for case in cases for option in ("--case", case)]
        return [
            "select",
            "dlopt.testing.models:StructuredMLP",
            *case_options,
            "--include",
            "native_channels_last",
            "--max-measure-time",
            "1",
            "--all-plans",
            *extra,
        ]

    return argv
