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


# flag → (config field, argparse options)
TRAIN_FLAGS = {
    "--model": ("model.name", {"help": "checkpoint path or short name (default minilm-l6)"}),
    "--max-seq-length": ("model.max_seq_length", {"type": int}),
    "--pooling": ("model.pooling", {"choices": POOLINGS}),
    "--dropout": ("model.dropout", {"type": float}),
    "--head-bias": (
        "model.head_bias",
        {"choices": HEAD_BIASES, "help": "multi-label head's initial bias (default: prior)"},
    ),
    "--lower-case": ("model.lower_case", {"type": _bool}),
    "--precision": ("model.precision", {"choices": PRECISIONS}),
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
        {"type": int, "help": "the most windows per document (default 8); the rest is dropped"},
    ),
    "--chunk-pooling": (
        "model.chunk_pooling",
        {"choices": CHUNK_POOLINGS, "help": "windows to one document vector (default mean)"},
    ),
    "--train": (
        "data.train",
        {
            "help": "training file(s) (CSV, TSV, JSONL, Parquet); a glob "
            "such as 'data/train-*.csv' reads every match"
        },
    ),
    "--eval": ("data.eval", {"help": "evaluation file, evaluated every epoch"}),
    "--format": ("data.format", {"choices": FORMATS}),
    "--text-column": ("data.text_column", {}),
    "--text-pair-column": ("data.text_pair_column", {}),
    "--label-column": ("data.label_column", {}),
    "--label-separator": (
        "data.label_separator",
        {
            "help": "splits a text label into a multi-label row's classes "
            "(default '|' with --task multi-label)"
        },
    ),
    "--buckets": (
        "data.buckets",
        {"type": _buckets, "help": "auto (default), none, or lengths e.g. 32,64,128"},
    ),
    "--max-train-examples": ("data.max_train_examples", {"type": int}),
    "--streaming": (
        "data.streaming",
        {
            "action": "store_true",
            "help": "stream --train from TFRecord shards prepared once into the cache "
            "(see `bertfit prepare`) instead of holding its rows in memory",
        },
    ),
    "--batch-size": ("train.batch_size", {"type": int, "help": "global batch size"}),
    "--epochs": ("train.epochs", {"type": int}),
    "--max-steps": (
        "train.max_steps",
        {
            "type": int,
            "help": "train exactly N optimizer steps instead of --epochs (the last epoch cut "
            "short; the learning-rate schedule spans N)",
        },
    ),
    "--learning-rate": ("train.learning_rate", {"type": float}),
    "--warmup-ratio": ("train.warmup_ratio", {"type": float}),
    "--weight-decay": ("train.weight_decay", {"type": float}),
    "--clip-norm": ("train.clip_norm", {"type": float}),
    "--seed": ("train.seed", {"type": int}),
    "--jit-compile": (
        "train.jit_compile",
        {"type": _bool_or_auto, "help": "XLA: true, false or auto (default: per device)"},
    ),
    "--strategy": ("train.strategy", {"choices": STRATEGIES}),
    "--cpu-replicas": ("train.cpu_replicas", {"type": int}),
    "--tpu": ("train.tpu", {"help": "TPU name, or 'local' on a TPU VM"}),
    "--workers": (
        "train.workers",
        {"type": _workers, "help": "host:port,... of every worker (multi-worker)"},
    ),
    "--worker-index": ("train.worker_index", {"type": int, "help": "this worker; 0 = chief"}),
    "--grad-accum": ("train.grad_accum", {"type": int, "help": "micro-batches per optimizer step"}),
    "--steps-per-execution": (
        "train.steps_per_execution",
        {"type": int, "help": "optimizer steps per host call"},
    ),
    "--best-metric": (
        "train.best_metric",
        {
            "choices": METRICS,
            "help": "default: accuracy, micro_f1 (multi-label) or rmse (regression)",
        },
    ),
    "--class-weights": (
        "train.class_weights",
        {"help": f"{NO_CLASS_WEIGHTS} (default), {BALANCED}, or a JSON file {{label: weight}}"},
    ),
    "--tune-threshold": (
        "train.tune_threshold",
        {
            "type": _bool,
            "help": "multi-label: pick the micro-F1-best threshold on --eval (default: true)",
        },
    ),
    "--save-every-steps": (
        "train.save_every_steps",
        {"type": int, "help": "also save a resumable checkpoint every N steps"},
    ),
    "--save-every-minutes": (
        "train.save_every_minutes",
        {"type": float, "help": "also save one every M minutes"},
    ),
    "--early-stopping-patience": (
        "train.early_stopping_patience",
        {
            "type": int,
            "help": "stop after N evaluations without an improvement of --best-metric "
            "(needs --eval)",
        },
    ),
    "--early-stopping-min-delta": (
        "train.early_stopping_min_delta",
        {"type": float, "help": "the smallest change that counts as an improvement (default 0)"},
    ),
    "--eval-every-steps": (
        "train.eval_every_steps",
        {"type": int, "help": "also evaluate every N optimizer steps (needs --eval)"},
    ),
}


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags `train` and `check` share."""
    parser.add_argument("--config", help="a run.yaml to start from; flags override it")
    parser.add_argument(
        "--output-dir",
        help="run directory (default: a new runs/<date>-<time>; runs/latest points to the newest)",
    )
    for flag, (_, options) in TRAIN_FLAGS.items():  # a flag not given leaves no attribute
        parser.add_argument(flag, default=argparse.SUPPRESS, **options)


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
