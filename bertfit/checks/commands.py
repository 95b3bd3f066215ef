"""`bertfit check`: the same flags as `train`, plus the target and the output form."""

from __future__ import annotations

import argparse

from bertfit.checks.findings import TARGETS
from bertfit.run_flags import add_train_arguments, run_config_from_args


def add_commands(subparsers) -> None:
    """Adds `check` to an argparse subparsers object; it sets `func(args) -> int`."""
    check = subparsers.add_parser(
        "check",
        help="find data, shape, dtype, input and gradient problems before training",
        description="Read the data, build the pipeline and the model exactly as `train` would, "
        "run one gradient step on one batch and XLA-compile the replica step for "
        "every bucket shape, without training. Exit 0 when clean, 2 on errors, "
        "1 on warnings with --strict.",
    )
    add_train_arguments(check)
    check.add_argument(
        "--target",
        choices=TARGETS,
        default="cpu",
        help="judge for this hardware (tpu: the TPU rehearsal)",
    )
    check.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="data-parallel replicas on the target (default: 8 for tpu, else --cpu-replicas or 1)",
    )
    check.add_argument(
        "--max-rows",
        type=int,
        default=50_000,
        help="tokenize at most this many rows per file (a counted sample)",
    )
    check.add_argument("--no-compile", action="store_true", help="skip the XLA compilation")
    check.add_argument(
        "--full-compile",
        action="store_true",
        help="also run XLA's backend when the target is this machine",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from bertfit.checks.api import check

    config = run_config_from_args(args)
    report = check(
        config,
        target=args.target,
        replicas=args.replicas,
        max_rows=args.max_rows,
        compile=not args.no_compile,
        full_compile=args.full_compile,
    )
    print(report.to_json() if args.json else report.render())
    return report.exit_code(strict=args.strict)
