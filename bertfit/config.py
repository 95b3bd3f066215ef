"""Typed run configuration: what to train on, with which model, and how.

A `RunConfig` is saved as `config.yaml` in every run directory and can be loaded back with
`bertfit train --config run.yaml`; flags given next to `--config` override its values.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import stat
import types
import typing
from pathlib import Path

import yaml

from bertfit import storage
from bertfit.atomic import write_text_atomic
from bertfit.errors import ConfigError
from bertfit.flags import flag, flag_name, flags_of, parse_bool, parse_bool_or_auto, parse_workers

PRECISIONS = ("fp32", "bf16", "mixed_bf16", "mixed_fp16")
ATTENTIONS = ("auto", "fused", "explicit")  # --attention (`bertfit.model.attention`)
# Master weights stay float32 in every mode: "bf16" is the TPU habit's name for bfloat16 compute
# with float32 variables, the same policy as "mixed_bf16". LayerNorm, softmax and the loss run in
# float32 (see model/encoder.py and model/classifier.py); float16 adds dynamic loss scaling.
PRECISION_POLICIES = {
    "fp32": "float32",
    "bf16": "mixed_bfloat16",
    "mixed_bf16": "mixed_bfloat16",
    "mixed_fp16": "mixed_float16",
}
CONVERT_TARGETS = ("hf", "tf-hub")  # `bertfit convert --to`
POOLINGS = ("cls", "mean")
# --pooling's value when neither it nor the checkpoint says (`bertfit.checkpoints.pooling`)
DEFAULT_POOLING = "cls"
# --batch-size and --epochs when left out and the training set is large enough for them; a
# small one gets a schedule that learns (`bertfit.training.schedule`)
DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS = 32, 3
# --few-shot-epochs: the contrastive stage's passes over the rows (measured: docs/training.md);
# 20 before 10 measured as well in half the time; the run configs saved then hold 20
FEW_SHOT_EPOCHS, FEW_SHOT_EPOCHS_BEFORE = 10, 20
HEAD_BIASES = ("prior", "zero")
# --long-documents: cut texts at max_seq_length, or classify them whole from windows (issue 35).
TRUNCATE, CHUNK = "truncate", "chunk"
LONG_DOCUMENTS = (TRUNCATE, CHUNK)
CHUNK_POOLINGS = ("mean", "max", "attention")
MAX_CHUNKS = 256
BASE_PRECISIONS = ("fp32", "bf16", "int8")  # --base-precision: a LoRA run's frozen weights
LORA_AUTO = "auto"  # --lora-targets' default: the family's attention query and value
MAX_LORA_RANK = 1024


def encoder_policy(model: ModelConfig) -> str:
    """The encoder's Keras dtype policy: `--precision`'s, or "bfloat16" (bfloat16 variables
    and compute) for a LoRA run's frozen base in bf16 (`--base-precision bf16`)."""
    if model.lora_rank and model.base_precision == "bf16":
        return "bfloat16"
    return PRECISION_POLICIES[model.precision]


def parse_names(text: str) -> list[str]:
    """A comma-separated flag's names: "query, value" → ["query", "value"]."""
    return [name.strip() for name in text.split(",") if name.strip()]


STRATEGIES = ("auto", "tpu", "mirrored", "multi-worker", "one-device", "default")
TASKS = ("single-label", "multi-label", "regression")
SINGLE_LABEL, MULTI_LABEL, REGRESSION = TASKS  # the task kinds by name (`bertfit.data.tasks`)
AUTO_BUCKETS, NO_BUCKETS = "auto", "none"  # `--buckets`: chosen from the data, or none
# The metrics of each task (bertfit.runs.metrics computes them), the default first.
TASK_METRICS = {
    "single-label": ("accuracy", "macro_f1", "mcc", "roc_auc", "loss"),
    "multi-label": ("micro_f1", "macro_f1", "subset_accuracy", "hamming_loss", "loss"),
    "regression": ("rmse", "mae", "pearson", "spearman", "loss"),
}
# Metrics a best checkpoint can be chosen by.
METRICS = tuple(dict.fromkeys(m for metrics in TASK_METRICS.values() for m in metrics))
# A learning rate above this makes AdamW's first steps move weights by more than their size: the
# run diverges (NaN) at once. Fine-tuning uses 1e-5 to 1e-4.
MAX_LEARNING_RATE = 1.0
# Logical CPU devices for rehearsing data parallelism: each is a full replica of the model.
MAX_CPU_REPLICAS = 64
# A run.yaml is a few hundred bytes; anything this large is another file.
MAX_CONFIG_BYTES = 2**20
# --class-weights: one of these, or a JSON file {label: weight}.
NO_CLASS_WEIGHTS, BALANCED = "none", "balanced"
CLASS_WEIGHTS = (NO_CLASS_WEIGHTS, BALANCED)
ENGINES = ("tensorflow", "onnx")  # predict/evaluate/serve --engine: the default first
# train --backend: the Keras backend training runs on, the default first (bertfit.backend).
TENSORFLOW_BACKEND, JAX_BACKEND = "tensorflow", "jax"
BACKENDS = (TENSORFLOW_BACKEND, JAX_BACKEND)
DATA_FORMATS = ("csv", "tsv", "jsonl", "parquet")  # --format (bertfit.data.sources reads them)
# The sections of `train --help` that are not a config section's own (model, data, training).
CALIBRATIONS = ("auto", "off")  # --calibrate (bertfit.runs.calibration)
EVALUATION, HARDWARE = "evaluation and checkpoints", "hardware and distribution"


def parse_buckets(text: str) -> str | list[int]:
    """`--buckets 32,64,128`, `none` (every batch padded to --max-seq-length) or `auto`
    (chosen from the training lengths)."""
    if text.lower() in (AUTO_BUCKETS, NO_BUCKETS):
        return text.lower()
    try:
        return sorted(int(b) for b in text.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"--buckets takes comma-separated lengths like 32,64,128, 'auto' or 'none', "
            f"got {text!r}"
        ) from e


@dataclasses.dataclass
class ModelConfig:
    """The pretrained encoder and the classification head on top of it.

    Args:
        name: a checkpoint path or a short name such as "minilm-l6".
        max_seq_length: the longest packed input, special tokens included.
        pooling: "cls" (the pooler on [CLS]) or "mean" (mean over unmasked tokens, for
            checkpoints whose pooler was never trained, such as sentence-transformers models);
            None: the pooling the checkpoint declares (a sentence-transformers model's
            `1_Pooling/config.json`, e.g. mean for "minilm-l6"), else "cls"
            (`bertfit.checkpoints.pooling`). A run decides it once and saves the value.
        dropout: dropout before the classification layer.
        head_bias: the classification layer's initial bias for multi-label tasks: "prior" (each
            label's log-odds in the training data, so rare labels start at their base rate)
            or "zero" (50% for every label). Single-label and regression heads start at zero.
        lower_case: override the checkpoint's casing (None: what its tokenizer config says).
        precision: fp32, bf16, mixed_bf16 or mixed_fp16.
        attention: how the encoder computes attention (`bertfit.model.attention`): "fused"
            (Keras' `dot_product_attention`: cuDNN flash attention on JAX's recent NVIDIA
            GPUs, Splash on TPUs where it applies), "explicit" (matrix products and a float32
            softmax), or "auto": explicit on CPUs (measured as fast or faster there), fused
            on JAX's GPUs and TPUs. Attention dropout, while it drops, is always explicit.
        task: "single-label", "multi-label" or "regression"; None infers it from the
            training labels (see `bertfit.data.tasks`).
        long_documents: "truncate" (texts cut at max_seq_length) or "chunk" (each text cut
            into overlapping windows of max_seq_length and classified whole from them; see
            `bertfit.text.windows` and `bertfit.model.chunked`).
        chunk_stride: ids two consecutive windows share; None: a quarter of a window's text
            ids (`WindowSpec.for_model`). Like max_chunks and chunk_pooling, only with
            long_documents "chunk".
        max_chunks: the most windows a document keeps; the ids after them are dropped and
            counted.
        chunk_pooling: how windows' vectors make one document vector: "mean", "max" or
            "attention" (a learned weighting), padding windows excluded.
        lora_rank: 0 (full fine-tuning) or the rank of LoRA adapters on the encoder's Dense
            layers (`bertfit.model.lora`): the base weights frozen, adapters and head trained.
        lora_alpha: the adapters' update is scaled by lora_alpha / lora_rank (None: the rank);
            with lora_rank only, as lora_targets and a base_precision other than "fp32".
        base_precision: a LoRA run's frozen base weights: "fp32", "bf16" (stored and
            computed in bfloat16) or "int8" (the transformer layers' kernels stored in int8,
            computed dequantized: `bertfit.model.int8`); the adapters and the head stay float32.
        lora_targets: which Dense layers get adapters: "auto" (the family's attention query
            and value), "all", or the last parts of their canonical names.
        normalize_features: the head reads the pooled vector divided by its length; None:
            true with `--few-shot` (`training.few_shot`), else false. A run decides it once
            and saves the value (a run saved without it reads false).
    """

    name: str = dataclasses.field(
        default="minilm-l6",
        metadata=flag(
            "checkpoint folder, archive, TF Hub SavedModel, or a short name", name="--model"
        ),
    )
    max_seq_length: int = dataclasses.field(
        default=128,
        metadata=flag("the longest packed input in tokens, special tokens included"),
    )
    pooling: str | None = dataclasses.field(
        default=None,
        metadata=flag(
            "cls: the pooler on [CLS]; mean: the mean of the token vectors (for checkpoints "
            "whose pooler was never trained, e.g. sentence-transformers; default: the pooling "
            "the checkpoint declares in its 1_Pooling/config.json, else cls)",
            choices=POOLINGS,
        ),
    )
    dropout: float = dataclasses.field(
        default=0.1, metadata=flag("dropout before the classification layer")
    )
    head_bias: str = dataclasses.field(
        default="prior",
        metadata=flag(
            "multi-label head's initial bias: each label's training log-odds (prior) or zero",
            choices=HEAD_BIASES,
        ),
    )
    lower_case: bool | None = dataclasses.field(
        default=None,
        metadata=flag(
            "true or false: override the checkpoint's casing (default: what its tokenizer "
            "config says)",
            type=parse_bool,
            metavar="BOOL",
        ),
    )
    precision: str = dataclasses.field(
        default="fp32",
        metadata=flag(
            "compute dtype; weights stay float32 (mixed_bf16 on TPU and recent GPUs, fp32 on CPU)",
            choices=PRECISIONS,
        ),
    )
    attention: str = dataclasses.field(
        default="auto",
        metadata=flag(
            "fused: Keras' dot_product_attention (cuDNN flash attention on JAX GPUs); "
            "explicit: matrix products and a float32 softmax; auto: explicit on CPUs, fused on "
            "JAX's GPUs and TPUs",
            choices=ATTENTIONS,
        ),
    )
    task: str | None = dataclasses.field(
        default=None,
        metadata=flag("default: inferred from the training labels", choices=TASKS),
    )
    long_documents: str = dataclasses.field(
        default=TRUNCATE,
        metadata=flag(
            "truncate (default) texts at --max-seq-length, or chunk them into overlapping "
            "windows and classify each document whole",
            choices=LONG_DOCUMENTS,
        ),
    )
    chunk_stride: int | None = dataclasses.field(
        default=None,
        metadata=flag(
            "with --long-documents chunk: ids two windows share (default: a quarter of a window)"
        ),
    )
    max_chunks: int = dataclasses.field(
        default=8,
        metadata=flag(
            "with --long-documents chunk: the most windows per document; the rest is dropped"
        ),
    )
    chunk_pooling: str = dataclasses.field(
        default="mean",
        metadata=flag(
            "with --long-documents chunk: windows to one document vector", choices=CHUNK_POOLINGS
        ),
    )
    lora_rank: int = dataclasses.field(
        default=0,
        metadata=flag(
            "LoRA: train rank-R adapters on the encoder's Dense layers (base weights frozen, "
            "the head trained); 0 = full fine-tuning (default)",
            metavar="R",
        ),
    )
    lora_alpha: float | None = dataclasses.field(
        default=None,
        metadata=flag(
            "with --lora-rank: LoRA's scale is alpha / rank (default: the rank, a scale of 1)"
        ),
    )
    base_precision: str = dataclasses.field(
        default="fp32",
        metadata=flag(
            "with --lora-rank: the frozen base's weights in fp32, bf16 (half their memory; "
            "the encoder computes in bfloat16) or int8 (the layers' kernels in a quarter, "
            "computed dequantized); the adapters and the head stay float32",
            choices=BASE_PRECISIONS,
        ),
    )
    lora_targets: list[str] = dataclasses.field(
        default_factory=lambda: [LORA_AUTO],
        metadata=flag(
            "with --lora-rank: the comma-separated Dense layers LoRA adapts: 'auto' (attention "
            "query and value; the fused qkv of ModernBERT, GTE, NomicBERT), 'all' (every Dense of "
            "the layers), or "
            "names such as query,key,value,attention_output,intermediate,output (default: auto)",
            type=parse_names,
            metavar="NAMES",
        ),
    )
    normalize_features: bool | None = dataclasses.field(
        default=None,
        metadata=flag(
            "true or false: the head reads the pooled vector divided by its length (default: "
            "true with --few-shot, whose first stage trains only the cosine between them)",
            type=parse_bool,
            metavar="BOOL",
        ),
    )


@dataclasses.dataclass
class DataConfig:
    """Where the labelled text is and how to read it.

    Args:
        train, eval: data files (CSV, TSV, JSONL, Parquet).
        format: force a format instead of guessing from the extension.
        text_column, text_pair_column, label_column: column names in the files.
        buckets: the sequence lengths batches are padded to: "auto" (the default: `train`
            chooses them from the training lengths, see `data.buckets.resolve_buckets`), "none"
            (every batch padded to max_seq_length), or a list of lengths (max_seq_length is
            always added). A run saves the list it resolved.
        max_train_examples: use only the first N training rows (reported, never silent).
        label_separator: splits a text label into the classes of a multi-label row ("|"
            by default with task multi-label).
        streaming: train from TFRecord shards of `train` (prepared once into the cache,
            memory flat in the rows) instead of holding its rows in memory; a prepared
            directory (`bertfit prepare`) as `train` is always streamed.
        packing: train and evaluate on packed batches (`bertfit.data.packed`): rows of
            max_seq_length tokens holding several examples each, one shape for the whole run,
            little padding; each example computes as if alone. `buckets` then serve only
            prediction and exports.
    """

    train: str | None = dataclasses.field(
        default=None,
        metadata=flag(
            "training file(s) (CSV, TSV, JSONL, Parquet) or a `bertfit prepare` folder; a glob "
            "such as 'data/train-*.csv' reads every match"
        ),
    )
    eval: str | None = dataclasses.field(
        default=None, metadata=flag("evaluation file, evaluated every epoch")
    )
    format: str | None = dataclasses.field(
        default=None,
        metadata=flag("the files' format (default: from their names)", choices=DATA_FORMATS),
    )
    text_column: str = dataclasses.field(
        default="text", metadata=flag("the column (JSONL: key) of the text")
    )
    text_pair_column: str | None = dataclasses.field(
        default=None,
        metadata=flag("the column of a second text, for pair tasks such as NLI (default: none)"),
    )
    label_column: str = dataclasses.field(default="label", metadata=flag("the column of the label"))
    buckets: str | list[int] = dataclasses.field(
        default=AUTO_BUCKETS,
        metadata=flag(
            "padded lengths: auto (chosen from the data), none, or e.g. 32,64,128",
            type=parse_buckets,
        ),
    )
    max_train_examples: int | None = dataclasses.field(
        default=None, metadata=flag("train on the first N rows only (default: all)")
    )
    label_separator: str | None = dataclasses.field(
        default=None,
        metadata=flag(
            "splits a text label into a multi-label row's classes (default '|' with --task "
            "multi-label)"
        ),
    )
    streaming: bool = dataclasses.field(
        default=False,
        metadata=flag(
            "stream --train from TFRecord shards prepared once into the cache (see `bertfit "
            "prepare`) instead of holding its rows in memory",
            switch=True,
        ),
    )
    packing: bool = dataclasses.field(
        default=False,
        metadata=flag(
            "train and evaluate on rows of --max-seq-length tokens packed with several "
            "examples each: one shape for the whole run, little padding",
            switch=True,
        ),
    )


@dataclasses.dataclass
class TrainConfig:
    """Optimisation and hardware.

    Args:
        batch_size: the global batch, summed over all replicas.
        epochs: passes over the training data.
            batch_size and epochs None: 32 and 3 where the training set is large enough,
            else a schedule that learns from a small one (`bertfit.training.schedule`). A run
            decides them once and saves the values.
        learning_rate, warmup_ratio, weight_decay, clip_norm: AdamW with linear warmup then
            linear decay, global-norm clipping.
        max_steps: train exactly this many optimizer steps instead of `epochs` (across
            epochs, the last one cut short; it then evaluates and saves as an epoch's end);
            the learning-rate schedule spans these steps. None: `epochs` whole epochs.
        few_shot: before the ordinary training, a first stage fine-tunes the encoder on
            sentence pairs made from the training rows (same label or not) with a cosine
            similarity loss, as SetFit does, for sets of a few examples per class
            (`training.few_shot`; docs/training.md#few-shot-training).
        few_shot_epochs: with `few_shot`, the first stage's passes over the training rows
            (each batch's every pair of rows trained on).
        seed: seeds initialisation, dropout and shuffling.
        jit_compile: XLA-compile the step: true, false, or null (auto: all of it on a GPU or
            TPU, none of it on a CPU; see `training.loop.XlaChoice`).
        strategy: auto, tpu, mirrored, multi-worker, one-device or default.
        backend: the Keras backend that trains: "tensorflow" (tf.distribute, the compiled
            step of `training.loop`) or "jax" (`jax.jit` and `keras.distribution` over every
            local JAX device, `training.jax_trainer`). Evaluation, export and serving are
            TensorFlow's either way; the checkpoints are the same files.
        cpu_replicas: split the CPU into N logical devices (rehearse data parallelism).
        tpu: a TPU name, or "local" on a TPU VM (TPUClusterResolver).
        workers: host:port of every worker (MultiWorkerMirroredStrategy without TF_CONFIG).
        worker_index: this process's position in `workers`; worker 0 is the chief.
        grad_accum: micro-batches accumulated per optimizer step inside the compiled step
            (effective batch = grad_accum × batch_size).
        remat: recompute each encoder layer's activations in the backward pass instead of
            keeping them (`model/remat.py`): activation memory of about one layer's plus each
            layer's input, for about a third more compute per step.
        steps_per_execution: optimizer steps per host call (one compiled loop); the batch plan
            groups steps in runs of this many of the same bucket.
        best_metric: the eval metric that picks the best checkpoint; None: the task's default
            (accuracy, micro_f1 for multi-label, rmse for regression).
        class_weights: "none", "balanced" (inverse class frequency) or a JSON file
            {label: weight}; single-label only.
        tune_threshold: multi-label: pick one decision threshold per label on the evaluation
            data (each label's F1-best, floored so a rare label is still predicted:
            `runs.calibration.label_thresholds`), saved with the run (on by default: with
            rare labels the probabilities of positives often stay under 0.5 for epochs while
            ranking them right; without --eval, or with false, the threshold is 0.5).
        calibrate: "auto": at the end of a run with --eval, fit temperature scaling (one per
            label for multi-label) on the best checkpoint's eval outputs and keep it where it
            lowers the NLL of held-out eval rows; a predictive interval from the eval residuals
            for regression (`runs.calibration`; docs/calibration.md); "off": neither.
        save_every_steps: also save a resumable checkpoint every N optimizer steps (long
            epochs); an epoch's end is saved too, unless the last save is under a minute old
            and neither an evaluation nor the run's end follows (`EPOCH_SAVE_GAP_SECONDS`).
        save_every_minutes: also save one whenever this many minutes passed since the last.
        early_stopping_patience: stop after this many evaluations in a row (at epoch ends, and
            every `eval_every_steps`) that did not improve `best_metric` by more than
            `early_stopping_min_delta` on its best so far; None: run every epoch. Needs `eval`.
        early_stopping_min_delta: the smallest change of `best_metric` that counts as an
            improvement for early stopping (the best checkpoint takes any improvement).
        eval_every_steps: also evaluate every N optimizer steps of the run (global steps;
            one that ends an epoch is that epoch's evaluation), for long epochs: the best
            checkpoint and early stopping see these evaluations too. Needs `eval`.
    """

    batch_size: int | None = dataclasses.field(
        default=None,
        metadata=flag(
            f"global batch size, summed over all replicas (default {DEFAULT_BATCH_SIZE}, less for "
            "a small training set: docs/training.md#small-training-sets)"
        ),
    )
    epochs: int | None = dataclasses.field(
        default=None,
        metadata=flag(
            f"passes over the training data (default {DEFAULT_EPOCHS}, more for a small training "
            "set: docs/training.md#small-training-sets)"
        ),
    )
    max_steps: int | None = dataclasses.field(
        default=None,
        metadata=flag(
            "train exactly N optimizer steps instead of --epochs (the last epoch cut short; the "
            "learning-rate schedule spans N)"
        ),
    )
    few_shot: bool = dataclasses.field(
        default=False,
        metadata=flag(
            "a few examples per class: first fine-tune the encoder on pairs of training rows "
            "(same label or not, SetFit's contrastive stage), then train as usual",
            switch=True,
        ),
    )
    few_shot_epochs: int = dataclasses.field(
        default=FEW_SHOT_EPOCHS,
        metadata=flag(
            f"with --few-shot: the first stage's passes over the training rows, each batch's "
            f"every pair of rows trained on (default {FEW_SHOT_EPOCHS})"
        ),
    )
    learning_rate: float = dataclasses.field(
        default=5e-5,
        metadata=flag("AdamW's peak learning rate (fine-tuning: 1e-5 to 1e-4)"),
    )
    warmup_ratio: float = dataclasses.field(
        default=0.1,
        metadata=flag("share of the steps that warm the learning rate up linearly"),
    )
    weight_decay: float = dataclasses.field(default=0.01, metadata=flag("AdamW's weight decay"))
    clip_norm: float = dataclasses.field(
        default=1.0, metadata=flag("clip the gradients' global norm to this")
    )
    seed: int = dataclasses.field(
        default=42, metadata=flag("seeds initialisation, dropout and shuffling")
    )
    jit_compile: bool | None = dataclasses.field(
        default=None,
        metadata=flag(
            "XLA: true, false or auto (default: on for GPU and TPU, off on CPU)",
            group=HARDWARE,
            type=parse_bool_or_auto,
            metavar="BOOL|auto",
        ),
    )
    strategy: str = dataclasses.field(
        default="auto",
        metadata=flag(
            "the tf.distribute strategy (auto: per device)", group=HARDWARE, choices=STRATEGIES
        ),
    )
    backend: str = dataclasses.field(
        default=TENSORFLOW_BACKEND,
        metadata=flag(
            "the Keras backend that trains: tensorflow, or jax (jax.jit, data parallel over "
            "every JAX device, on every host; for TPUs that run only JAX)",
            group=HARDWARE,
            choices=BACKENDS,
        ),
    )
    cpu_replicas: int | None = dataclasses.field(
        default=None,
        metadata=flag("split the CPU into N replicas (rehearse data parallelism)", group=HARDWARE),
    )
    tpu: str | None = dataclasses.field(
        default=None, metadata=flag("TPU name, or 'local' on a TPU VM", group=HARDWARE)
    )
    workers: list[str] | None = dataclasses.field(
        default=None,
        metadata=flag(
            "host:port,... of every worker (multi-worker)", group=HARDWARE, type=parse_workers
        ),
    )
    worker_index: int | None = dataclasses.field(
        default=None,
        metadata=flag("this worker's place in --workers; 0 = chief", group=HARDWARE),
    )
    grad_accum: int = dataclasses.field(
        default=1, metadata=flag("micro-batches accumulated per optimizer step")
    )
    remat: bool = dataclasses.field(
        default=False,
        metadata=flag(
            "recompute each layer's activations in the backward pass: long sequences and large "
            "batches fit, for about a third more compute",
            switch=True,
        ),
    )
    steps_per_execution: int = dataclasses.field(
        default=1, metadata=flag("optimizer steps per host call", group=HARDWARE)
    )
    best_metric: str | None = dataclasses.field(
        default=None,
        metadata=flag(
            "the eval metric that picks the best checkpoint (default: accuracy, micro_f1 for "
            "multi-label, rmse for regression)",
            group=EVALUATION,
            choices=METRICS,
        ),
    )
    class_weights: str = dataclasses.field(
        default=NO_CLASS_WEIGHTS,
        metadata=flag(
            f"{NO_CLASS_WEIGHTS} (default), {BALANCED} (inverse class frequency), or a JSON "
            "file {label: weight}; single-label only"
        ),
    )
    tune_threshold: bool = dataclasses.field(
        default=True,
        metadata=flag(
            "multi-label: pick one F1-best threshold per label on --eval",
            group=EVALUATION,
            type=parse_bool,
            metavar="BOOL",
        ),
    )
    calibrate: str = dataclasses.field(
        default="auto",
        metadata=flag(
            "auto: at the end of the run fit temperature scaling on --eval, kept where it "
            "lowers held-out eval NLL (regression: a predictive interval); off: none",
            group=EVALUATION,
            choices=CALIBRATIONS,
        ),
    )
    save_every_steps: int | None = dataclasses.field(
        default=None,
        metadata=flag("also save a resumable checkpoint every N steps", group=EVALUATION),
    )
    save_every_minutes: float | None = dataclasses.field(
        default=None, metadata=flag("also save one every M minutes", group=EVALUATION)
    )
    early_stopping_patience: int | None = dataclasses.field(
        default=None,
        metadata=flag(
            "stop after N evaluations without an improvement of --best-metric (needs --eval; "
            "default: run every epoch)",
            group=EVALUATION,
        ),
    )
    early_stopping_min_delta: float = dataclasses.field(
        default=0.0,
        metadata=flag("the smallest change that counts as an improvement", group=EVALUATION),
    )
    eval_every_steps: int | None = dataclasses.field(
        default=None,
        metadata=flag("also evaluate every N optimizer steps (needs --eval)", group=EVALUATION),
    )


@dataclasses.dataclass
class RunConfig:
    """Everything a training run needs; saved as `config.yaml` in the run directory.

    `output_dir` None means a new directory `runs/<date>-<time>` per run.
    """

    output_dir: str | None = None
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    def validate(self) -> RunConfig:
        """Checks every field's type and range; a `ConfigError` names the field and its flag."""
        for section in (self.model, self.data, self.train):
            _check_types(section, type(section).__name__.replace("Config", "").lower())
        for field, ok, requirement in self._rules():
            if not ok:
                value = _get(self, field)
                raise ConfigError(
                    f"{field} ({flag_of(field)}) must be {requirement}; got {value!r}."
                )
        return self

    def _rules(self) -> list[tuple[str, bool, str]]:
        m, d, t = self.model, self.data, self.train
        return [
            *self._choice_rules(),
            ("model.max_seq_length", 8 <= m.max_seq_length <= 8192, "between 8 and 8192"),
            ("model.dropout", 0 <= m.dropout < 1, "in [0, 1)"),
            ("model.max_chunks", 1 <= m.max_chunks <= MAX_CHUNKS, f"between 1 and {MAX_CHUNKS}"),
            (
                "model.lora_rank",
                0 <= m.lora_rank <= MAX_LORA_RANK,
                f"between 0 and {MAX_LORA_RANK}",
            ),
            (
                "model.lora_alpha",
                m.lora_alpha is None or (math.isfinite(m.lora_alpha) and m.lora_alpha > 0),
                "a positive number",
            ),
            ("model.lora_targets", len(m.lora_targets) > 0, "at least one layer name"),
            *self._only_with_rules(),
            (
                "model.base_precision",
                m.base_precision == "fp32" or m.lora_rank > 0,
                "fp32 without --lora-rank (only a frozen base can be stored in bf16 or int8: "
                "add --lora-rank 8, or leave --base-precision out)",
            ),
            (
                "model.base_precision",
                m.base_precision != "int8" or m.precision != "mixed_fp16",
                "bf16 or fp32 with --precision mixed_fp16 (Keras' int8 layers do not compute "
                "in float16: use --precision mixed_bf16 or fp32)",
            ),
            (
                "model.chunk_stride",
                m.chunk_stride is None or 0 <= m.chunk_stride < m.max_seq_length - 2,
                f"at least 0 and less than max_seq_length - 2 ({m.max_seq_length - 2}, the "
                "text ids of one window)",
            ),
            (
                "data.buckets",
                d.buckets in (AUTO_BUCKETS, NO_BUCKETS)
                or (
                    isinstance(d.buckets, list)
                    and all(1 <= b <= m.max_seq_length for b in d.buckets)
                ),
                f"{AUTO_BUCKETS!r}, {NO_BUCKETS!r} or lengths between 1 and max_seq_length "
                f"{m.max_seq_length}",
            ),
            (
                "data.packing",
                not d.packing or m.long_documents == TRUNCATE,
                "off with --long-documents chunk (each document's windows are its rows "
                "already): leave --packing out",
            ),
            (
                "data.packing",
                not d.packing or not d.streaming,
                "off with --streaming (packing plans the rows in memory): leave one out",
            ),
            (
                "data.max_train_examples",
                d.max_train_examples is None or d.max_train_examples >= 1,
                "at least 1",
            ),
            (
                "data.label_separator",
                d.label_separator is None or d.label_separator != "",
                "a non-empty string",
            ),
            ("train.batch_size", t.batch_size is None or t.batch_size >= 1, "at least 1"),
            ("train.epochs", t.epochs is None or t.epochs >= 1, "at least 1"),
            ("train.max_steps", t.max_steps is None or t.max_steps >= 1, "at least 1"),
            (
                "train.learning_rate",
                math.isfinite(t.learning_rate) and 0 < t.learning_rate <= MAX_LEARNING_RATE,
                f"a positive number no larger than {MAX_LEARNING_RATE} (fine-tuning uses "
                "1e-5 to 1e-4)",
            ),
            ("train.few_shot_epochs", t.few_shot_epochs >= 1, "at least 1"),
            (
                "train.few_shot_epochs",
                t.few_shot or t.few_shot_epochs == FEW_SHOT_EPOCHS,
                "given only with --few-shot (its first stage's passes): add --few-shot, or "
                "leave --few-shot-epochs out",
            ),
            (
                "train.few_shot",
                not (t.few_shot and (d.streaming or m.long_documents == CHUNK)),
                "off with --streaming and with --long-documents chunk (its pairs are made "
                "from training rows held in memory, one text each): leave one out",
            ),
            ("train.warmup_ratio", 0 <= t.warmup_ratio < 1, "in [0, 1)"),
            (
                "train.weight_decay",
                math.isfinite(t.weight_decay) and t.weight_decay >= 0,
                "zero or positive",
            ),
            (
                "train.clip_norm",
                math.isfinite(t.clip_norm) and t.clip_norm > 0,
                "a positive number",
            ),
            ("train.seed", 0 <= t.seed < 2**32, f"between 0 and {2**32 - 1}"),
            (
                "train.cpu_replicas",
                t.cpu_replicas is None or 1 <= t.cpu_replicas <= MAX_CPU_REPLICAS,
                f"at least 1 and at most {MAX_CPU_REPLICAS} (logical CPU devices rehearse "
                "data parallelism; more only slow the run down)",
            ),
            (
                "train.worker_index",
                not t.workers or t.worker_index is not None,
                "given with --workers (this process's position in the list, 0 = chief)",
            ),
            (
                "train.worker_index",
                not t.workers or 0 <= (t.worker_index or 0) < len(t.workers),
                f"between 0 and {len(t.workers or []) - 1}",
            ),
            ("train.grad_accum", t.grad_accum >= 1, "at least 1"),
            ("train.steps_per_execution", t.steps_per_execution >= 1, "at least 1"),
            (
                "train.save_every_steps",
                t.save_every_steps is None or t.save_every_steps >= 1,
                "at least 1",
            ),
            (
                "train.save_every_minutes",
                t.save_every_minutes is None
                or (math.isfinite(t.save_every_minutes) and t.save_every_minutes > 0),
                "a positive number",
            ),
            (
                "train.early_stopping_patience",
                t.early_stopping_patience is None or t.early_stopping_patience >= 1,
                "at least 1 (evaluations without an improvement before training stops)",
            ),
            (
                "train.early_stopping_patience",
                t.early_stopping_patience is None or d.eval is not None,
                "given only with --eval FILE: early stopping watches --best-metric on the "
                "evaluation data; add --eval or leave --early-stopping-patience out",
            ),
            (
                "train.early_stopping_min_delta",
                math.isfinite(t.early_stopping_min_delta) and t.early_stopping_min_delta >= 0,
                "zero or positive",
            ),
            (
                "train.early_stopping_min_delta",
                t.early_stopping_min_delta == 0 or t.early_stopping_patience is not None,
                "given only with --early-stopping-patience N (alone it changes nothing)",
            ),
            (
                "train.eval_every_steps",
                t.eval_every_steps is None or t.eval_every_steps >= 1,
                "at least 1",
            ),
            (
                "train.eval_every_steps",
                t.eval_every_steps is None or d.eval is not None,
                "given only with --eval FILE (the data it evaluates on); add --eval or leave "
                "--eval-every-steps out",
            ),
        ]

    def _only_with_rules(self) -> list[tuple[str, bool, str]]:
        """Settings that mean something only beside another one stay at their defaults without
        it: alone they would change nothing, silently."""
        m = self.model
        groups = [
            (
                ("lora_alpha", "lora_targets"),
                m.lora_rank > 0,
                "--lora-rank R (without it every weight is fine-tuned, none adapted)",
                "add --lora-rank 8",
            ),
            (
                ("chunk_stride", "max_chunks", "chunk_pooling"),
                m.long_documents == CHUNK,
                "--long-documents chunk (without it texts are truncated, never cut into windows)",
                "add --long-documents chunk",
            ),
        ]
        return [
            (
                f"model.{name}",
                needed or _at_default(m, name),
                f"given only with {partner}: {fix}, or leave {flag_of(f'model.{name}')} out",
            )
            for names, needed, partner, fix in groups
            for name in names
        ]

    def _choice_rules(self) -> list[tuple[str, bool, str]]:
        """A field whose flag has choices holds one of them (or None where its type allows:
        `_check_types` has checked that)."""
        rules = []
        for section, cls in SECTIONS.items():
            for spec in flags_of(cls, prefix=f"{section}."):
                if spec.choices is not None:
                    value = _get(self, spec.field)
                    ok = value is None or value in spec.choices
                    rules.append((spec.field, ok, f"one of {', '.join(spec.choices)}"))
        return rules

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        write_text_atomic(path, yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> RunConfig:
        values = dict(values or {})
        kwargs = {}
        for key, value in values.items():
            if key in SECTIONS:
                value = _upgrade(key, value or {})
                kwargs[key] = _build(SECTIONS[key], value, f"{source}: {key}")
            elif key == "output_dir":
                if value is not None and not isinstance(value, str):
                    raise ConfigError(f"{source}: output_dir must be a string; got {value!r}.")
                kwargs[key] = value
            else:
                raise ConfigError(
                    f"{source}: unknown key {key!r}; expected output_dir, model, data, train."
                )
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        """A run config from YAML (as `save` writes it); anything else is a `ConfigError`."""
        try:
            if storage.is_url(path):  # a run's config.yaml in a bucket
                data = storage.read_bytes(os.fspath(path))
            elif not stat.S_ISREG(os.stat(path).st_mode):
                raise ConfigError(f"{path}: not a regular file; pass a run.yaml.")
            else:
                data = Path(path).read_bytes()
            if len(data) > MAX_CONFIG_BYTES:
                raise ConfigError(
                    f"{path}: {len(data):,} bytes is far too large for a run config "
                    f"(at most {MAX_CONFIG_BYTES:,}); is this the right file?"
                )
            values = yaml.safe_load(data.decode("utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError) as e:
            reason = (
                "not UTF-8 text"
                if isinstance(e, UnicodeDecodeError)
                else "nested too deeply"
                if isinstance(e, RecursionError)
                else " ".join((getattr(e, "strerror", None) or str(e)).split())[:300]
            )
            raise ConfigError(f"{path}: cannot read the run config: {reason}") from None
        if values is not None and not isinstance(values, dict):
            raise ConfigError(
                f"{path}: a run config is a mapping (output_dir, model, data, train); this "
                f"file holds {_yaml_kind(values)}."
            )
        return cls.from_dict(values, str(path))


# RunConfig's sections by name (the keys of config.yaml, the prefixes of dotted fields).
SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}

# Settings that say where and how fast a run executes, not what it computes: a run may be
# resumed with other values (say, on another machine after a preemption).
EXECUTION_SETTINGS = frozenset(
    {
        "output_dir",
        "train.strategy",
        "train.cpu_replicas",
        "train.tpu",
        "train.workers",
        "train.worker_index",
        "train.jit_compile",
        "train.steps_per_execution",
        "train.save_every_steps",
        "train.save_every_minutes",
    }
)


def config_differences(a: RunConfig, b: RunConfig) -> list[str]:
    """The dotted settings whose values differ between `a` and `b` and that change what a run
    computes (see EXECUTION_SETTINGS), e.g. `["train.learning_rate: 5e-05 → 0.0001"]`."""
    flat_a, flat_b = _flatten(a.to_dict()), _flatten(b.to_dict())
    return [
        f"{key}: {flat_a.get(key)!r} → {flat_b.get(key)!r}"
        for key in sorted(flat_a.keys() | flat_b.keys())
        if key not in EXECUTION_SETTINGS and flat_a.get(key) != flat_b.get(key)
    ]


def check_positions(
    max_seq_length: int, max_position_embeddings: int, where: str, flag: str = "--max-seq-length"
) -> None:
    """The packed length must fit the checkpoint's position table (else XLA would clamp the
    positions and return wrong numbers). `flag` is the option that sets the length."""
    if max_seq_length > max_position_embeddings:
        name = flag.lstrip("-").replace("-", "_")
        raise ConfigError(
            f"{name} {max_seq_length} is longer than {where}'s position table "
            f"(max_position_embeddings {max_position_embeddings}); use {flag} "
            f"{max_position_embeddings} or less."
        )


def per_replica_batch(global_batch: int, replicas: int, setting: str = "--batch-size") -> int:
    """global_batch / replicas, or a `ConfigError` with the arithmetic and the two nearest
    batch sizes that divide (`setting` is what to change, a flag by default).

    Examples:
    >>> per_replica_batch(32, 4)
    8
    """
    if global_batch % replicas:
        lower = global_batch - global_batch % replicas
        raise ConfigError(
            f"The global batch size {global_batch} does not divide over {replicas} replicas "
            f"({global_batch} / {replicas} = {global_batch / replicas:.2f} examples per replica). "
            f"Every replica must get the same number: use {setting} {lower or replicas} or "
            f"{lower + replicas}."
        )
    return global_batch // replicas


def _yaml_kind(value) -> str:
    kinds = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def _upgrade(section: str, values):
    """Reads the run configs saved before buckets were spelled "auto" / "none" ([] and null),
    before `--few-shot` trained on every pair within a batch (`few_shot_pairs`, a count of
    listed pairs a row that no longer configures anything: such a run's first stage is done),
    and before `--few-shot-epochs` defaulted to 10 (a run without `--few-shot` saved 20, which
    configured nothing; a few-shot run keeps its 20)."""
    if section == "train" and isinstance(values, dict):
        retired = {"few_shot_pairs"}
        if not values.get("few_shot") and values.get("few_shot_epochs") == FEW_SHOT_EPOCHS_BEFORE:
            retired.add("few_shot_epochs")
        values = {k: v for k, v in values.items() if k not in retired}
    if section == "data" and isinstance(values, dict) and "buckets" in values:
        old = values["buckets"]
        if old == []:
            return {**values, "buckets": AUTO_BUCKETS}
        if old is None:
            return {**values, "buckets": NO_BUCKETS}
    return values


def _flatten(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _build(cls, values: dict, where: str):
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {values!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; known keys: {sorted(names)}")
    section = cls(**values)
    _check_types(section, where)
    return section


def flag_of(field: str) -> str:
    """The command-line flag of a dotted config field: "train.learning_rate" → "--learning-rate"
    (declared on the field, see `bertfit.flags`)."""
    section, name = field.split(".")
    (found,) = (f for f in dataclasses.fields(SECTIONS[section]) if f.name == name)
    return flag_name(found)


def _at_default(section, name: str) -> bool:
    """Whether a config section's field holds its declared default."""
    field = next(f for f in dataclasses.fields(section) if f.name == name)
    default = (
        field.default if field.default_factory is dataclasses.MISSING else field.default_factory()
    )
    return getattr(section, name) == default


def _get(config, dotted: str):
    section, name = dotted.split(".")
    return getattr(getattr(config, section), name)


def _check_types(section, where: str) -> None:
    """Each field holds a value of its annotated type (YAML `max_seq_length: "64"` does not)."""
    hints = typing.get_type_hints(type(section))
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        if not _is_a(value, hints[field.name]):
            raise ConfigError(
                f"{where}: {field.name} must be {_describe(hints[field.name])}; "
                f"got {value!r} ({type(value).__name__})."
            )


def _is_a(value, hint) -> bool:
    args = typing.get_args(hint)
    if hint is type(None):
        return value is None
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_is_a(value, arg) for arg in args)
    if typing.get_origin(hint) is list:
        return isinstance(value, list) and all(_is_a(v, args[0]) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _describe(hint) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        plural = {int: "integers", str: "strings", float: "numbers"}
        return f"a list of {plural.get(typing.get_args(hint)[0], 'values')}"
    names = {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        str: "a string",
        type(None): "null",
    }
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def override(config, values: dict) -> None:
    """Sets `section.field` values (from command-line flags); `validate` checks them."""
    for dotted, value in values.items():
        section_name, field = dotted.split(".")
        section = getattr(config, section_name)
        hints = typing.get_type_hints(type(section))
        if field not in hints:
            raise ConfigError(f"unknown setting {dotted}")
        setattr(section, field, value)
