"""`bertfit check`: the same flags as `train`, plus the target and the output form."""

from __future__ import annotations

import argparse

from bertfit.checks.findings import TARGETS
from bertfit.run_flags import (
    add_run_output_arguments,
    add_train_arguments,
    run_config_from_args,
    select_run_backend,
)


def add_commands(subparsers) -> None:
    """Adds `check` to an argparse subparsers object; it sets `handler(args) -> int`."""
    parser = subparsers.add_parser(
        "check",
        help="find data, shape, dtype, input and gradient problems before training",
        description="Read the data, build the pipeline and the model exactly as `train` would, "
        "run one gradient step on one batch and, when training will use XLA (a TPU or GPU "
        "target), XLA-compile the replica step for every bucket shape, without training. "
        "With --backend jax: the JAX step's gradients on one batch, then the step compiled "
        "ahead of time with jax.jit for every bucket (compilations and XLA's memory per "
        "bucket). Takes every `train` flag. Exit 0 when clean, 2 on errors, 1 on warnings "
        "with --strict.",
    )
    add_run_output_arguments(add_train_arguments(parser), pasted=True)
    check = parser.add_argument_group("check")
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
    compiling = check.add_mutually_exclusive_group()
    compiling.add_argument(
        "--compile",
        action="store_true",
        default=None,
        help="XLA-compile every bucket shape even when training will not use XLA (default: "
        "only when it will: a TPU or GPU target, or --jit-compile true)",
    )
    compiling.add_argument(
        "--no-compile",
        dest="compile",
        action="store_false",
        help="skip the XLA compilation",
    )
    check.add_argument(
        "--full-compile",
        action="store_true",
        help="also run XLA's backend when the target is this machine",
    )
    check.add_argument(
        "--device-memory",
        metavar="SIZE",
        help="memory per replica on the target, e.g. 16GB: whether a training step fits, and "
        "which setting makes it fit (default: this machine's memory for a cpu target)",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings")
    parser.set_defaults(handler=run_check, preflight=select_run_backend)
    add_doctor(subparsers)


def run_check(args: argparse.Namespace) -> int:
    from bertfit.checks.api import check
    from bertfit.checks.memory import parse_memory

    config = run_config_from_args(args)
    device_memory = None if args.device_memory is None else parse_memory(args.device_memory)
    report = check(
        config,
        target=args.target,
        replicas=args.replicas,
        max_rows=args.max_rows,
        compile=args.compile,
        full_compile=args.full_compile,
        device_memory=device_memory,
    )
    print(report.to_json() if args.json else report.render())
    return report.exit_code(strict=args.strict)


def add_doctor(subparsers) -> None:
    """Adds `doctor` (bertfit.checks.doctor) to an argparse subparsers object."""
    command = subparsers.add_parser(
        "doctor",
        help="self-test a new machine: compile every bucket, time steps, MFU, memory, compiles",
        description="Build the run exactly as `train` would (the same flags), compile every "
        "length bucket with one step each, then time --steps more steps: examples/s, step "
        "time, model FLOPs utilisation, peak memory, and the XLA compilations after the "
        "warm-up (the goal is 0). Nothing is written. Run it first on a new TPU or GPU.",
    )
    add_run_output_arguments(add_train_arguments(command), pasted=True)
    command.add_argument(
        "--steps", type=int, default=20, help="steps to time after the warm-up (default 20)"
    )
    command.add_argument(
        "--peak-tflops",
        type=float,
        help="the device's peak dense TFLOP/s per replica, for MFU where bertfit does not know "
        "it (default: a data sheet's for known GPUs and TPUs, measured on a CPU)",
    )
    command.add_argument("--json", action="store_true", help="print the report as JSON")
    command.set_defaults(handler=run_doctor, preflight=select_run_backend)


def run_doctor(args: argparse.Namespace) -> int:
    from bertfit.checks.doctor import doctor

    report = doctor(run_config_from_args(args), steps=args.steps, peak_tflops=args.peak_tflops)
    print(report.to_json() if args.json else report.render())
    return 0
