"""What every command shares: exit codes and the ``--device``/``--host`` target."""

from __future__ import annotations

import argparse

from dlopt.target import ExecutionTarget

#: 0 success, 1 the work ran but failed, 2 bad usage or input (argparse's convention).
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def cli_target(args: argparse.Namespace) -> ExecutionTarget:
    """The ``--device``/``--host`` target of a command, checked against torch."""
    target = ExecutionTarget(args.device, host=getattr(args, "host", None))
    target.check_known()
    return target


def add_target_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--device`` and ``--host``, shared by every command that names a target."""
    parser.add_argument("--device", default="cpu", help=f"device to {verb} (default: cpu)")
    parser.add_argument(
        "--host",
        default=None,
        help="where the model and inputs live when plans compute elsewhere (an SDK that "
        "takes host tensors: --device npu:0 --host cpu)",
    )
