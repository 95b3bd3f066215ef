"""The flags of a run, shared by `bertfit train` and `bertfit check`: each flag, the
`RunConfig` field it sets and its argparse options, and the config they make."""

from __future__ import annotations

import argparse

from bertfit.config import (
    BALANCED,
    CHUNK_POOLINGS,
    HEAD_BIASES,
    LONG_DOCUMENTS,
    METRICS,
    NO_CLASS_WEIGHTS,
    POOLINGS,
    PRECISIONS,
    STRATEGIES,
    TASKS,
    RunConfig,
    override,
)
from bertfit.data.sources import FORMATS
from bertfit.errors import BertfitError


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _bool_or_auto(text: str) -> bool | None:
    return None if text.lower() == "auto" else _bool(text)


def _workers(text: str) -> list[str]:
    workers = [w.strip() for w in text.split(",") if w.strip()]
    if not workers or any(":" not in w for w in workers):
        raise argparse.ArgumentTypeError(
            f"--workers takes comma-separated host:port pairs, e.g. 10.0.0.1:2222,10.0.0.2:2222; "
            f"got {text!r}"
        )
    return workers


def _buckets(text: str) -> str | list[int]:
    """`--buckets 32,64,128`, `none` (every batch padded to --max-seq-length) or `auto`
    (chosen from the training lengths)."""
    if text.lower() in ("auto", "none"):
        return text.lower()
    try:
        return sorted(int(b) for b in text.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"--buckets takes comma-separated lengths like 32,64,128, 'auto' or 'none', "
            f"got {text!r}"
        ) from e


# The flags of a run by group (the sections of `train --help`, `check --help` and `tune --help`):
# flag → (config field, argparse options). A help that does not say its default gets the
# `RunConfig` default appended (`_with_default`): the config owns the value, the help quotes it.
TRAIN_FLAG_GROUPS = {
    "model": {
        "--model": (
            "model.name",
            {"help": "checkpoint folder, archive, TF Hub SavedModel, or a short name"},
        ),
        "--max-seq-length": (
            "model.max_seq_length",
            {"type": int, "help": "the longest packed input in tokens, special tokens included"},
        ),
        "--pooling": (
            "model.pooling",
            {
                "choices": POOLINGS,
                "help": "cls: the pooler on [CLS]; mean: the mean of the token vectors (for "
                "checkpoints whose pooler was never trained, e.g. sentence-transformers)",
            },
        ),
        "--dropout": (
            "model.dropout",
            {"type": float, "help": "dropout before the classification layer"},
        ),
        "--head-bias": (
            "model.head_bias",
            {
                "choices": HEAD_BIASES,
                "help": "multi-label head's initial bias: each label's training log-odds "
                "(prior) or zero",
            },
        ),
        "--lower-case": (
            "model.lower_case",
            {
                "type": _bool,
                "metavar": "BOOL",
                "help": "true or false: override the checkpoint's casing (default: what its "
                "tokenizer config says)",
            },
        ),
        "--precision": (
            "model.precision",
            {
                "choices": PRECISIONS,
                "help": "compute dtype; weights stay float32 (mixed_bf16 on TPU and recent "
                "GPUs, fp32 on CPU)",
            },
        ),
        "--task": (
            "model.task",
            {"choices": TASKS, "help": "default: inferred from the training labels"},
        ),
        "--long-documents": (
            "model.long_documents",
            {
                "choices": LONG_DOCUMENTS,
                "help": "truncate (default) texts at --max-seq-length, or chunk them into "
                "overlapping windows and classify each document whole",
            },
        ),
        "--chunk-stride": (
            "model.chunk_stride",
            {"type": int, "help": "ids two windows share (default: a quarter of a window)"},
        ),
        "--max-chunks": (
            "model.max_chunks",
            {"type": int, "help": "the most windows per document; the rest is dropped"},
        ),
        "--chunk-pooling": (
            "model.chunk_pooling",
            {"choices": CHUNK_POOLINGS, "help": "windows to one document vector"},
        ),
    },
    "data": {
        "--train": (
            "data.train",
            {
                "help": "training file(s) (CSV, TSV, JSONL, Parquet) or a `bertfit prepare` "
                "folder; a glob such as 'data/train-*.csv' reads every match"
            },
        ),
        "--eval": ("data.eval", {"help": "evaluation file, evaluated every epoch"}),
        "--format": (
            "data.format",
            {"choices": FORMATS, "help": "the files' format (default: from their names)"},
        ),
        "--text-column": ("data.text_column", {"help": "the column (JSONL: key) of the text"}),
        "--text-pair-column": (
            "data.text_pair_column",
            {"help": "the column of a second text, for pair tasks such as NLI (default: none)"},
        ),
        "--label-column": ("data.label_column", {"help": "the column of the label"}),
        "--label-separator": (
            "data.label_separator",
            {
                "help": "splits a text label into a multi-label row's classes "
                "(default '|' with --task multi-label)"
            },
        ),
        "--buckets": (
            "data.buckets",
            {
                "type": _buckets,
                "help": "padded lengths: auto (chosen from the data), none, or e.g. 32,64,128",
            },
        ),
        "--max-train-examples": (
            "data.max_train_examples",
            {"type": int, "help": "train on the first N rows only (default: all)"},
        ),
        "--streaming": (
            "data.streaming",
            {
                "action": "store_true",
                "help": "stream --train from TFRecord shards prepared once into the cache "
                "(see `bertfit prepare`) instead of holding its rows in memory",
            },
        ),
    },
    "training": {
        "--batch-size": (
            "train.batch_size",
            {"type": int, "help": "global batch size, summed over all replicas"},
        ),
        "--epochs": ("train.epochs", {"type": int, "help": "passes over the training data"}),
        "--max-steps": (
            "train.max_steps",
            {
                "type": int,
                "help": "train exactly N optimizer steps instead of --epochs (the last epoch "
                "cut short; the learning-rate schedule spans N)",
            },
        ),
        "--learning-rate": (
            "train.learning_rate",
            {"type": float, "help": "AdamW's peak learning rate (fine-tuning: 1e-5 to 1e-4)"},
        ),
        "--warmup-ratio": (
            "train.warmup_ratio",
            {"type": float, "help": "share of the steps that warm the learning rate up linearly"},
        ),
        "--weight-decay": ("train.weight_decay", {"type": float, "help": "AdamW's weight decay"}),
        "--clip-norm": (
            "train.clip_norm",
            {"type": float, "help": "clip the gradients' global norm to this"},
        ),
        "--seed": (
            "train.seed",
            {"type": int, "help": "seeds initialisation, dropout and shuffling"},
        ),
        "--grad-accum": (
            "train.grad_accum",
            {"type": int, "help": "micro-batches accumulated per optimizer step"},
        ),
        "--class-weights": (
            "train.class_weights",
            {
                "help": f"{NO_CLASS_WEIGHTS} (default), {BALANCED} (inverse class frequency), "
                "or a JSON file {label: weight}; single-label only"
            },
        ),
    },
    "evaluation and checkpoints": {
        "--best-metric": (
            "train.best_metric",
            {
                "choices": METRICS,
                "help": "the eval metric that picks the best checkpoint (default: accuracy, "
                "micro_f1 for multi-label, rmse for regression)",
            },
        ),
        "--tune-threshold": (
            "train.tune_threshold",
            {
                "type": _bool,
                "metavar": "BOOL",
                "help": "multi-label: pick the micro-F1-best threshold on --eval",
            },
        ),
        "--eval-every-steps": (
            "train.eval_every_steps",
            {"type": int, "help": "also evaluate every N optimizer steps (needs --eval)"},
        ),
        "--early-stopping-patience": (
            "train.early_stopping_patience",
            {
                "type": int,
                "help": "stop after N evaluations without an improvement of --best-metric "
                "(needs --eval; default: run every epoch)",
            },
        ),
        "--early-stopping-min-delta": (
            "train.early_stopping_min_delta",
            {"type": float, "help": "the smallest change that counts as an improvement"},
        ),
        "--save-every-steps": (
            "train.save_every_steps",
            {"type": int, "help": "also save a resumable checkpoint every N steps"},
        ),
        "--save-every-minutes": (
            "train.save_every_minutes",
            {"type": float, "help": "also save one every M minutes"},
        ),
    },
    "hardware and distribution": {
        "--strategy": (
            "train.strategy",
            {"choices": STRATEGIES, "help": "the tf.distribute strategy (auto: per device)"},
        ),
        "--jit-compile": (
            "train.jit_compile",
            {
                "type": _bool_or_auto,
                "metavar": "BOOL|auto",
                "help": "XLA: true, false or auto (default: on for GPU and TPU, off on CPU)",
            },
        ),
        "--steps-per-execution": (
            "train.steps_per_execution",
            {"type": int, "help": "optimizer steps per host call"},
        ),
        "--cpu-replicas": (
            "train.cpu_replicas",
            {"type": int, "help": "split the CPU into N replicas (rehearse data parallelism)"},
        ),
        "--tpu": ("train.tpu", {"help": "TPU name, or 'local' on a TPU VM"}),
        "--workers": (
            "train.workers",
            {"type": _workers, "help": "host:port,... of every worker (multi-worker)"},
        ),
        "--worker-index": (
            "train.worker_index",
            {"type": int, "help": "this worker's place in --workers; 0 = chief"},
        ),
    },
}
TRAIN_FLAGS = {flag: spec for group in TRAIN_FLAG_GROUPS.values() for flag, spec in group.items()}


def _with_default(field: str, options: dict) -> dict:
    """`options` with the config's default appended to a help that does not give one."""
    section, name = field.split(".")
    default = getattr(getattr(RunConfig(), section), name)
    help = options.get("help", "")
    if "default" in help or default is None or default is False:
        return options
    shown = ",".join(map(str, default)) if isinstance(default, list) else default
    return {**options, "help": f"{help} (default {shown})"}


def add_config_arguments(parser: argparse.ArgumentParser, *, sweep: bool = False):
    """--config and --output-dir in a "run and output" group, which it returns (the command's
    own flags of that kind join it)."""
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
            required=True,
            help="the sweep directory; rerunning the same command there resumes the sweep",
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
    """Every flag of `TRAIN_FLAG_GROUPS` in its group; `swept(flag, options)` may replace a
    flag's options (`bertfit tune`'s comma-separated values)."""
    for title, flags in TRAIN_FLAG_GROUPS.items():
        group = parser.add_argument_group(title)
        for flag, (field, options) in flags.items():  # a flag not given leaves no attribute
            options = _with_default(field, options)
            options = swept(flag, options) if swept else options
            group.add_argument(flag, default=argparse.SUPPRESS, **options)


def run_config_from_args(args) -> RunConfig:
    """The run config of `--config` (or the defaults) with the flags given on top."""
    config = RunConfig.load(args.config) if args.config else RunConfig()
    if args.output_dir:
        config.output_dir = args.output_dir
    given = vars(args)
    override(
        config,
        {
            field: given[_dest(flag)]
            for flag, (field, _) in TRAIN_FLAGS.items()
            if _dest(flag) in given
        },
    )
    if not config.data.train:
        raise BertfitError("--train FILE is required (or data.train in --config).")
    return config.validate()


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")
