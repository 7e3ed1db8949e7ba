"""Regenerate the tables dlopt-core ships, so that no selection pays for them.

    python tools/tables.py boundaries   # measurement/boundary_levels.json (a few minutes)
    python tools/tables.py priors [RESULTS.json ...]   # selection/priors.json, from the
                                        # benchmark suite's results (docs/benchmarks/)

(or ``python3 -m nox -s tables -- boundaries``). Each table is written whole, sorted, as
strict JSON; the tests check that a shipped table matches what its code computes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "packages" / "dlopt-core" / "src" / "dlopt"

#: The (first look, last look) settings every default race and cache recheck use:
#: MeasurementPolicy's min_rounds..max_rounds, and the recheck probe's (cache/recheck.py).
BOUNDARY_SETTINGS = ((3, 100), (3, 12))


def boundaries() -> Path:
    from dlopt.measurement.sequential import (
        ALPHA_GRID_LOW,
        ALPHA_GRID_RATIO,
        TABLE_FILE,
        alpha_grid,
        exact_per_look_level,
    )

    settings = []
    for first, last in BOUNDARY_SETTINGS:
        start = time.perf_counter()
        alphas = [float(a) for a in alpha_grid()]
        levels = [exact_per_look_level(a, first, last) for a in alphas]
        settings.append({"first": first, "last": last, "alphas": alphas, "levels": levels})
        print(f"looks {first}..{last}: {len(alphas)} levels in {time.perf_counter() - start:.0f} s")
    table = {
        "format": 1,
        "alpha_grid": {"low": ALPHA_GRID_LOW, "ratio": ALPHA_GRID_RATIO},
        "settings": settings,
    }
    path = CORE / "measurement" / TABLE_FILE
    path.write_text(json.dumps(table, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="table", required=True)
    sub.add_parser("boundaries", help="the sequential boundary's per-look levels")
    priors = sub.add_parser("priors", help="the plans' priors from benchmark suite results")
    priors.add_argument("results", nargs="*", help="results.json files (default: docs/benchmarks)")
    args = parser.parse_args(argv)
    if args.table == "boundaries":
        print(f"wrote {boundaries()}")
        return 0
    from dlopt.selection.prior_table import write_prior_table

    print(f"wrote {write_prior_table([Path(p) for p in args.results] or None)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
