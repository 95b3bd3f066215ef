"""`bertfit audit`'s flags: `--from SWEEP` (a k-fold sweep's out-of-fold predictions), or
`bertfit tune`'s flags with --folds (the folds run first, in --output-dir), and the audit's own.
Light: parsed before TensorFlow loads."""

from __future__ import annotations

import argparse

from bertfit.config import TENSORFLOW_BACKEND
from bertfit.data.run_files import check_run_files
from bertfit.errors import ConfigError
from bertfit.run_flags import RUN_FLAGS
from bertfit.sweeps.confident import FLAG_RULES, METHODS, RANKINGS
from bertfit.sweeps.flags import add_tune_arguments, positive_whole_number, sweep_from_args
from bertfit.tf_startup import select_keras_backend


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    audit = parser.add_argument_group("audit")
    audit.add_argument(
        "--from",
        dest="from_sweep",
        metavar="SWEEP",
        help="audit the out-of-fold predictions of this `bertfit tune --folds K` sweep "
        "(no training); without it, the train flags and --folds run the folds in --output-dir",
    )
    audit.add_argument(
        "--trial",
        help="the sweep's trial to audit (default: its only one; with several, each fold's "
        "rows from the trial whose run fits its own validation slice best, the held-out "
        "labels never choosing)",
    )
    audit.add_argument(
        "--method",
        choices=METHODS,
        default=METHODS[0],
        help="which rows to flag: prune-by-noise-rate (default: as many per pair of labels as "
        "the calibrated confident joint estimates, largest margin first) or confident-joint "
        "(every row confidently of another class)",
    )
    audit.add_argument(
        "--rank-by",
        choices=RANKINGS,
        default=RANKINGS[0],
        help="the score flagged rows are ranked by, lowest first: self-confidence (default: "
        "the probability of the given label) or normalized-margin",
    )
    audit.add_argument(
        "--flag",
        choices=FLAG_RULES,
        default=FLAG_RULES[0],
        help="how many of the method's rows are flagged: seen (default: the first of its "
        "ranking, as many as the folds see wrong, their own mistakes left out) or all (every "
        "row it flags, cleanlab's set)",
    )
    audit.add_argument(
        "--top",
        type=positive_whole_number,
        metavar="K",
        help="flag at most K rows, the most likely wrong (a review budget; default: every row "
        "the method flags)",
    )
    audit.add_argument(
        "--max-fraction",
        type=_fraction,
        metavar="F",
        help="flag at most this fraction of the training rows, the most likely wrong (0 < F <= 1)",
    )
    audit.add_argument(
        "--output",
        metavar="DIR",
        help="where the audit is written (default: SWEEP/audit)",
    )
    # With --from no sweep runs, so --output-dir is optional.
    add_tune_arguments(
        parser, sweep_dir_help="the sweep directory the folds run in (without --from)"
    )


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction above 0 and at most 1, got {text!r}")
    return value


def audit_options(args) -> dict:
    """`audit_sweep`'s options from the flags (a trial not given: chosen per fold)."""
    options = {
        "method": args.method,
        "rank_by": args.rank_by,
        "flag": args.flag,
        "top": args.top,
        "max_fraction": args.max_fraction,
        "output": args.output,
    }
    return {**options, "trial": args.trial} if args.trial else options


def check_from_alone(args) -> None:
    """--from reads a finished sweep: a train flag beside it would be silently unused."""
    given = vars(args)
    extra = [name for name, spec in RUN_FLAGS.items() if spec.dest in given]
    extra += [f for f in ("--config", "--output-dir") if given.get(f[2:].replace("-", "_"))]
    if extra:
        raise ConfigError(
            f"--from audits an existing sweep's predictions; {', '.join(extra)} would not be "
            "used. Drop them, or drop --from to run the folds with them."
        )


def training_from_args(args):
    """The base run config and the k-fold sweep to run (no --from); `sweep_from_args`'s."""
    if not args.output_dir:
        raise ConfigError(
            "bertfit audit: pass --from SWEEP (a k-fold sweep's predictions), or the train "
            "flags with --folds K and --output-dir DIR (the folds are run there)."
        )
    return sweep_from_args(args)


def audit_preflight(args) -> None:
    """`audit`'s preflight: running the folds, the train flags' `--backend` is Keras' backend
    (as `tune`'s) and the data files are read through (`check_run_files`); auditing --from a
    sweep trains nothing and runs on TensorFlow."""
    if args.from_sweep:
        select_keras_backend(TENSORFLOW_BACKEND)
    else:
        base, _ = training_from_args(args)
        select_keras_backend(base.train.backend)
        check_run_files(base)
