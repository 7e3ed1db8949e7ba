"""The sequential boundary's levels come from a table shipped with the package for the
default settings, and are computed once per machine for any other: no race pays them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlopt.measurement import sequential
from dlopt.measurement.sequential import (
    TABLE_FILE,
    alpha_grid,
    exact_per_look_level,
    per_look_level,
    tabulated_levels,
)


def test_the_default_race_and_the_recheck_probe_are_tabulated():
    assert {(3, 100), (3, 12)} <= set(tabulated_levels())
    alphas, levels = tabulated_levels()[(3, 12)]
    assert np.allclose(alphas, alpha_grid())
    assert np.all(np.diff(levels) > 0)  # a larger alpha, a larger level per look


@pytest.mark.parametrize("setting", [(3, 12), (3, 100)])
def test_the_shipped_levels_are_what_the_code_computes(setting):
    alphas, levels = tabulated_levels()[setting]
    for index in (0, len(alphas) // 2, len(alphas) - 40):
        assert exact_per_look_level(float(alphas[index]), *setting) == pytest.approx(
            levels[index], rel=1e-9
        )


def test_a_level_between_grid_points_is_the_stricter_neighbours():
    alphas, levels = tabulated_levels()[(3, 12)]
    between = float(alphas[100] * 1.03)
    assert per_look_level(between, 3, 12) == levels[100]
    assert per_look_level(between, 3, 12) <= exact_per_look_level(between, 3, 12)


def test_below_the_grid_and_other_settings_are_computed_exactly():
    assert per_look_level(1e-8, 3, 12) == exact_per_look_level(1e-8, 3, 12)
    assert (3, 9) not in tabulated_levels()
    assert per_look_level(0.05, 3, 9) == exact_per_look_level(0.05, 3, 9)


def test_a_calibration_is_kept_per_machine_and_a_bad_copy_is_computed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DLOPT_USER_CACHE_DIR", str(tmp_path))
    sequential._min_tail_probabilities.cache_clear()
    first = sequential._min_tail_probabilities(3, 6)
    (kept,) = (tmp_path / "boundaries").glob("min-tails-3-6-*.npy")
    sequential._min_tail_probabilities.cache_clear()
    monkeypatch.setattr(sequential, "_simulate_min_tails", lambda *a: pytest.fail("simulated"))
    assert np.array_equal(sequential._min_tail_probabilities(3, 6), first)  # read back
    kept.write_bytes(b"not an array")
    sequential._min_tail_probabilities.cache_clear()
    monkeypatch.setattr(sequential, "_simulate_min_tails", lambda *a: first[::-1].copy())
    again = sequential._min_tail_probabilities(3, 6)
    assert np.array_equal(again, first[::-1])  # the bad copy was not trusted
    sequential._min_tail_probabilities.cache_clear()


def test_another_dlopt_version_computes_its_own_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("DLOPT_USER_CACHE_DIR", str(tmp_path))
    sequential._min_tail_probabilities.cache_clear()
    first = sequential._min_tail_probabilities(3, 5)
    monkeypatch.setattr(sequential, "__version__", "99.0")
    sequential._min_tail_probabilities.cache_clear()
    calls = []
    monkeypatch.setattr(sequential, "_simulate_min_tails", lambda *a: calls.append(a) or first)
    sequential._min_tail_probabilities(3, 5)
    assert calls == [(3, 5)]  # the other version's copy was not read
    assert len(list((tmp_path / "boundaries").glob("min-tails-3-5-*.npy"))) == 2
    sequential._min_tail_probabilities.cache_clear()


def test_the_shipped_table_is_strict_json():
    from importlib.resources import files

    text = files("dlopt.measurement").joinpath(TABLE_FILE).read_text("utf-8")
    json.loads(text, parse_constant=lambda c: pytest.fail(c))


def test_a_fifo_in_place_of_a_kept_boundary_is_set_aside_and_computed_again(tmp_path, monkeypatch):
    """A FIFO where the boundary file belongs used to hang the selection in a blocking
    open, forever."""
    import os

    from dlopt.measurement import sequential
    from dlopt.platform.fileio import UserCacheWarning

    monkeypatch.setenv("DLOPT_USER_CACHE_DIR", str(tmp_path))
    sequential._min_tail_probabilities.cache_clear()
    sequential._min_tail_probabilities(3, 4)  # computed and kept
    (kept,) = (tmp_path / "boundaries").glob("*.npy")
    kept.unlink()
    os.mkfifo(kept)
    sequential._min_tail_probabilities.cache_clear()
    with pytest.warns(UserCacheWarning, match="not a regular file") as warned:
        again = sequential._min_tail_probabilities(3, 4)
    assert str(kept) in str(warned[0].message)
    assert again.shape == (sequential._CALIBRATION_PATHS,)
    assert kept.is_file()  # written anew, the FIFO set aside
    sequential._min_tail_probabilities.cache_clear()
