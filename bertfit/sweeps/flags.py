"""`bertfit tune`'s flags: every `bertfit train` flag (`run_flags.RUN_FLAGS`), the swept ones
taking comma-separated values, and the sweep's own (--seeds, --folds, --trials). Light: parsed
before TensorFlow loads."""

from __future__ import annotations

import argparse

from bertfit.config import RunConfig
from bertfit.data.run_files import check_run_files
from bertfit.run_flags import RUN_FLAGS, add_config_arguments, add_run_flags, run_config_from_args
from bertfit.sweeps.spec import SWEPT_FLAGS, SweepSpec
from bertfit.tf_startup import select_keras_backend


def _values(flag: str, options: dict):
    """The argparse type of a swept flag: comma-separated values, each parsed and checked as
    the train flag's own."""
    parse, choices = options.get("type", str), options.get("choices")

    def values(text: str) -> list:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"expected comma-separated values, got {text!r}")
        parsed = [parse(item) for item in items]
        if choices is not None and any(v not in choices for v in parsed):
            raise argparse.ArgumentTypeError(
                f"each value must be one of {', '.join(choices)}; got {text!r}"
            )
        if len(set(parsed)) < len(parsed):
            raise argparse.ArgumentTypeError(f"a value is repeated in {text!r}")
        return parsed

    values.__name__ = flag.lstrip("-")  # argparse names the type in its messages
    return values


def positive_whole_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _swept(flag: str, options: dict) -> dict:
    """A swept flag takes comma-separated values (`--learning-rate 1e-5,3e-5`)."""
    if flag not in SWEPT_FLAGS:
        return options
    help = f"{options.get('help', '')} (comma-separated values are swept)".lstrip()
    return {"type": _values(flag, options), "help": help, "metavar": options.get("metavar")}


def add_tune_arguments(parser: argparse.ArgumentParser, sweep_dir_help: str | None = None) -> None:
    output = add_config_arguments(parser, sweep=True, sweep_dir_help=sweep_dir_help)
    output.add_argument(
        "--no-report",
        action="store_true",
        help="write no report.html (neither the runs' nor the sweep's)",
    )
    output.add_argument(
        "--json",
        action="store_true",
        help="print the result as one JSON line (default: a few lines for people)",
    )
    output.add_argument("--quiet", action="store_true", help="no progress output")
    sweep = parser.add_argument_group("sweep")
    sweep.add_argument(
        "--seeds",
        type=positive_whole_number,
        default=1,
        help="runs per trial, at seeds --seed, --seed+1, ... (default 1)",
    )
    sweep.add_argument(
        "--folds",
        type=positive_whole_number,
        help="k-fold cross-validation on --train: K runs per trial and seed, each choosing on a "
        "slice of its training part and scored on its held-out fold (stratified); out-of-fold "
        "predictions written",
    )
    sweep.add_argument(
        "--trials",
        type=positive_whole_number,
        help="random search: this many of the grid's combinations, drawn at random (seeded "
        "by --seed); default: the whole grid",
    )
    add_run_flags(parser, swept=_swept)


def sweep_from_args(args) -> tuple[RunConfig, SweepSpec]:
    """The base run config (every flag given, the swept ones at their first value) and the
    sweep: the swept flags with more than one value make the grid."""
    given = vars(args)
    grid, first = {}, {}
    for flag in map(RUN_FLAGS.get, SWEPT_FLAGS):
        if flag.dest in given:
            first[flag.dest] = given[flag.dest][0]
            if len(given[flag.dest]) > 1:
                grid[flag.field] = given[flag.dest]
    base = run_config_from_args(
        argparse.Namespace(**{**given, **first}), eval_file_given_later=bool(args.folds)
    )
    seeds = [base.train.seed + i for i in range(args.seeds)]
    spec = SweepSpec(grid, seeds, args.folds, args.trials, search_seed=base.train.seed)
    return base, spec


def tune_preflight(args) -> None:
    """`tune`'s preflight, before TensorFlow loads Keras: the sweep's `--backend` made Keras'
    backend (its runs train in this process, one after another), and its data files read
    through (`check_run_files`)."""
    base, _ = sweep_from_args(args)
    select_keras_backend(base.train.backend)
    check_run_files(base)
