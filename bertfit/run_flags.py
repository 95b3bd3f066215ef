"""The flags of a run, shared by `bertfit train`, `check`, `doctor` and `tune`: the flags
declared on `RunConfig`'s fields (`bertfit.flags`), in the sections of `--help`, and the config
they make."""

from __future__ import annotations

import argparse
import dataclasses

from bertfit.config import EVALUATION, HARDWARE, SECTIONS, RunConfig, override
from bertfit.data.run_files import check_run_files
from bertfit.errors import BertfitError
from bertfit.flags import Flag, add_flags, flags_of, given
from bertfit.tf_startup import select_keras_backend

# The sections of `train --help` (and `check`, `doctor`, `tune`), in order; a flag is in its
# config section's own unless its field names another (`Flag.group`).
SECTION_GROUPS = {"model": "model", "data": "data", "train": "training"}
RUN_FLAG_GROUPS = (*SECTION_GROUPS.values(), EVALUATION, HARDWARE)


def _run_flags() -> dict[str, Flag]:
    """Every flag of a run, declared on `RunConfig`'s section dataclasses: flag → `Flag`, whose
    `field` is the dotted config field ("train.learning_rate")."""
    flags = {}
    for section, cls in SECTIONS.items():
        for spec in flags_of(cls, prefix=f"{section}."):
            spec = spec if spec.group else dataclasses.replace(spec, group=SECTION_GROUPS[section])
            flags[spec.name] = spec
    return flags


RUN_FLAGS = _run_flags()


def add_config_arguments(
    parser: argparse.ArgumentParser, *, sweep: bool = False, sweep_dir_help: str | None = None
):
    """--config and --output-dir in a "run and output" group, which it returns (the command's
    own flags of that kind join it). `sweep_dir_help`: a sweep's --output-dir is optional, and
    said so (`bertfit audit --from` runs no sweep)."""
    output = parser.add_argument_group("run and output")
    output.add_argument(
        "--config",
        help="a run.yaml to start "
        + ("every trial " if sweep else "")
        + "from (e.g. a run's config.yaml); flags override it",
    )
    if sweep:
        output.add_argument(
            "--output-dir",
            required=sweep_dir_help is None,
            help=sweep_dir_help
            or "the sweep directory; rerunning the same command there resumes the sweep",
        )
    else:
        output.add_argument(
            "--output-dir",
            help="run directory (default: a new runs/<date>-<time>; runs/latest points to "
            "the newest)",
        )
    return output


def add_run_output_arguments(group, *, pasted: bool = False) -> None:
    """`train`'s own flags beside the config (how the command runs and what it prints).
    `check` and `doctor` take them too (`pasted`), so that a `train` command can be pasted
    after them as it is; they write no run, so the flags change nothing there (their --json
    is their own)."""
    accepted = "train's flag, accepted so that a train command can be pasted as it is (this "
    accepted += "command writes no run): "
    flags = {
        "--resume": "continue the unfinished run in --output-dir (done without asking when its "
        "config is this one)",
        "--overwrite": "clear the run in --output-dir first",
        "--no-report": "do not write report.html at the end (`bertfit report` can later)",
        "--quiet": "no progress output",
    }
    for flag, help in flags.items():
        group.add_argument(flag, action="store_true", help=accepted + help if pasted else help)
    if not pasted:
        group.add_argument(
            "--json",
            action="store_true",
            help="print the summary as one JSON line (default: a few lines for people)",
        )


def add_train_arguments(parser: argparse.ArgumentParser):
    """The flags `train` and `check` share: --config, --output-dir and the run's flags, in
    their groups; returns the "run and output" group."""
    output = add_config_arguments(parser)
    add_run_flags(parser)
    return output


def add_run_flags(parser: argparse.ArgumentParser, swept=None) -> None:
    """Every flag of `RUN_FLAGS`, in its section of `--help`; `swept(flag, options)` may
    replace a flag's options (`bertfit tune`'s comma-separated values)."""
    groups = {title: parser.add_argument_group(title) for title in RUN_FLAG_GROUPS}
    flags = sorted(RUN_FLAGS.values(), key=lambda spec: RUN_FLAG_GROUPS.index(spec.group))
    add_flags(parser, flags, groups, swept)


def run_config_from_args(args, *, eval_file_given_later: bool = False) -> RunConfig:
    """The run config of `--config` (or the defaults) with the flags given on top.
    `eval_file_given_later`: the runs will each get an --eval (k-fold runs: a validation slice
    of their training part), so what needs one (early stopping) is checked as if it were there."""
    config = RunConfig.load(args.config) if args.config else RunConfig()
    if args.output_dir:
        config.output_dir = args.output_dir
    override(config, given(args, RUN_FLAGS.values()))
    if not config.data.train:
        raise BertfitError("--train FILE is required (or data.train in --config).")
    if eval_file_given_later and config.data.eval is None:
        each_runs = dataclasses.replace(config.data, eval="(each run's validation slice)")
        dataclasses.replace(config, data=each_runs).validate()
        return config
    return config.validate()


def select_run_backend(args) -> RunConfig:
    """The run's `--backend` (or its --config file's) made Keras' backend, before TensorFlow
    loads Keras, which reads it once (`check`'s and `doctor`'s preflight); returns the run's
    config."""
    config = run_config_from_args(args)
    select_keras_backend(config.train.backend)
    return config


def train_preflight(args) -> None:
    """`train`'s preflight, before TensorFlow loads: the run's `--backend` made Keras'
    backend, and its data files read through (`check_run_files`: a bad row is said at once)."""
    check_run_files(select_run_backend(args))
