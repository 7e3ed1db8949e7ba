"""``dlopt select --objective`` and what goes with it: latency budgets and batch sizes.

``--objective min_latency`` races batch 1; ``--objective max_throughput`` races one
request at several batch sizes (``--batch-sizes 1,2,4,8`` or ``--max-batch-size 64``,
default ``1,2,4,8,16,32``) and serves the (plan, batch size) with the most items per
second, within ``--max-latency-ms`` (mean) or ``--max-p99-latency-ms`` (p99) per call when
one is given (docs/selection.md, "Objectives"). Bad combinations are refused before
anything is imported or built, each with what to do instead. ``--strategy min-latency``
and ``--strategy max-throughput``, the spelling before the glossary gave the concept one
word, still work and say they are deprecated.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dlopt.cli.preflight import check_positive
from dlopt.errors import ConfigurationError

#: The retired ``--strategy`` words and the objectives they name.
RETIRED_STRATEGIES = {"min-latency": "min_latency", "max-throughput": "max_throughput"}


def add_objective_arguments(p: argparse.ArgumentParser) -> None:
    """The latency budget and the batch sizes of ``dlopt select`` (and the retired
    ``--strategy``, which names an objective)."""
    p.add_argument(
        "--strategy",
        choices=tuple(RETIRED_STRATEGIES),
        default=None,
        help="deprecated: use --objective min_latency or --objective max_throughput",
    )
    p.add_argument(
        "--max-latency-ms",
        type=float,
        default=None,
        metavar="MS",
        help="latency budget: mean milliseconds per call (with max-throughput: per call at "
        "the chosen batch size, checked with an upper confidence bound)",
    )
    p.add_argument(
        "--max-p99-latency-ms",
        type=float,
        default=None,
        metavar="MS",
        help="latency budget on the p99 per call instead of the mean",
    )
    p.add_argument(
        "--batch-sizes",
        default=None,
        metavar="1,2,4,8",
        help="with --objective max_throughput: the batch sizes to race (default 1,2,4,8,16,32)",
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=None,
        metavar="N",
        help="with --objective max_throughput: race powers of two up to N, dropping the sizes "
        "from the first the model runs out of memory at",
    )


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> ``(1, 2, 4, 8)``; anything else is a clear error."""
    from dlopt.settings.workload import MAX_BATCH_SIZE

    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise ConfigurationError(
            f"--batch-sizes {text!r}: write whole numbers joined by commas, e.g. 1,2,4,8"
        )
    sizes = [int(part) for part in parts]
    bad = [size for size in sizes if not 1 <= size <= MAX_BATCH_SIZE]
    if bad:
        raise ConfigurationError(
            f"--batch-sizes {text!r}: {bad[0]} is out of range; give sizes from 1 to "
            f"{MAX_BATCH_SIZE}, e.g. 1,2,4,8"
        )
    if len(set(sizes)) != len(sizes):
        raise ConfigurationError(f"--batch-sizes {text!r} repeats a size: list each size once")
    return tuple(sorted(sizes))


def objective_of(args: argparse.Namespace, default: str) -> str:
    """The objective ``--objective`` (or the retired ``--strategy``) names (``default``
    when neither)."""
    if args.strategy is not None:
        return RETIRED_STRATEGIES[args.strategy]
    return args.objective if args.objective is not None else default


def warn_retired(args: argparse.Namespace) -> None:
    """One line on stderr for the retired ``--strategy``: what to type instead."""
    if args.strategy is not None:
        print(
            f"dlopt: warning: --strategy is deprecated: use --objective "
            f"{RETIRED_STRATEGIES[args.strategy]}",
            file=sys.stderr,
        )


def races_batches(args: argparse.Namespace) -> bool:
    """Whether the command races batch sizes: ``--objective max_throughput``."""
    return objective_of(args, "") == "max_throughput"


def check_objective_arguments(
    args: argparse.Namespace, input_shape: tuple[int, ...] | None = None
) -> None:
    """Refuse combinations that cannot mean what was typed, before anything is built
    (``input_shape``: the shape ``--input`` gives, when given)."""
    from dlopt.settings.workload import MAX_BATCH_SIZE

    if args.strategy is not None and args.objective is not None:
        raise ConfigurationError(
            f"give --objective only: the deprecated --strategy {args.strategy} sets the "
            f"objective {RETIRED_STRATEGIES[args.strategy]!r} too"
        )
    if args.max_latency_ms is not None and args.max_p99_latency_ms is not None:
        raise ConfigurationError(
            "give one latency budget: --max-latency-ms (the mean per call) or "
            "--max-p99-latency-ms (the p99 per call), not both"
        )
    check_positive("--max-latency-ms", args.max_latency_ms, example="20")
    check_positive("--max-p99-latency-ms", args.max_p99_latency_ms, example="20")
    if args.batch_sizes is not None and args.max_batch_size is not None:
        raise ConfigurationError(
            "give --batch-sizes or --max-batch-size, not both: --batch-sizes lists the sizes "
            "to race, --max-batch-size races powers of two up to it"
        )
    if args.batch_sizes is not None:
        parse_batch_sizes(args.batch_sizes)
    if args.max_batch_size is not None and not 1 <= args.max_batch_size <= MAX_BATCH_SIZE:
        raise ConfigurationError(
            f"--max-batch-size {args.max_batch_size}: give a whole number from 1 to "
            f"{MAX_BATCH_SIZE}, e.g. 64"
        )
    sizes_given = args.batch_sizes is not None or args.max_batch_size is not None
    if sizes_given and not races_batches(args):
        raise ConfigurationError(
            "--batch-sizes/--max-batch-size choose the batch sizes --objective "
            "max_throughput races; add --objective max_throughput (the latency objectives "
            "serve batch 1 or the given shapes)"
        )
    if not races_batches(args):
        return
    if args.case:
        raise ConfigurationError(
            "--objective max_throughput races ONE request at several batch sizes: give it as "
            "--input 1x... (batch 1), not --case signatures"
        )
    if input_shape is not None:
        shape = input_shape
        if shape[0] != 1:
            one = "x".join(map(str, (1, *shape[1:])))
            raise ConfigurationError(
                f"--input {args.input}: with --objective max_throughput the input is ONE "
                f"request, batch 1 along the first dimension (e.g. {one}); dlopt repeats it "
                "to each batch size"
            )


def batched(workload: Any, args: argparse.Namespace) -> Any:
    """``workload`` as the batched profile ``--objective max_throughput`` races: its one
    request repeated to each batch size (``workload`` unchanged for other objectives)."""
    if not races_batches(args):
        return workload
    sizes = parse_batch_sizes(args.batch_sizes) if args.batch_sizes is not None else None
    try:
        return workload.as_batched(sizes, max_batch_size=args.max_batch_size)
    except ValueError as exc:
        raise ConfigurationError(
            f"--objective max_throughput races one request at several batch sizes: {exc}; on "
            "the command line give --input 1x... or an inputs file with one entry"
        ) from None
