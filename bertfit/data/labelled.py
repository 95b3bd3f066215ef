"""How a run reads its labelled files: the rows of `--train` (one file or a glob,
`bertfit.data.run_files`) and `--eval` as `bertfit train` reads them, the task they hold, and
their ids, tokenized in memory as `LabelledData` (or, with `--long-documents chunk`,
`LabelledDocuments`: whole documents cut into windows), with each example's weight in the loss
(`--class-weights`).

`train`, `check` and `tune` read through these functions, so they see the same rows alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bertfit.config import BALANCED, NO_CLASS_WEIGHTS, RunConfig
from bertfit.data.pipeline import EncodedTexts, encode_texts
from bertfit.data.run_files import source_spec
from bertfit.data.sources import Example, read_examples
from bertfit.data.tasks import SINGLE_LABEL, Task, infer_task
from bertfit.data.tfrecord import is_prepared
from bertfit.data.training_data import LabelledData, LabelledDocuments
from bertfit.data.windowed import encode_documents
from bertfit.errors import ConfigError
from bertfit.text.windows import WindowSpec


def infer_run_task(examples: list[Example], config: RunConfig) -> tuple[Task, list[str]]:
    """The task of the training rows (`--task`, or inferred) and notes for the user."""
    return infer_task(
        examples, config.data.train, kind=config.model.task, separator=config.data.label_separator
    )


def read_labelled(
    path: str, config: RunConfig, tokenizer, task: Task | None, labels_required: bool = True
) -> LabelledData:
    examples = read_examples(path, source_spec(config), labels_required=labels_required)
    return encode_labelled(path, examples, config, tokenizer, task)


def encode_labelled(
    path: str, examples: list[Example], config: RunConfig, tokenizer, task: Task | None
) -> LabelledData:
    """Tokenizes the examples (and their pairs); their targets when a task is given. With
    `--long-documents chunk` each text is tokenized once and cut into windows
    (`LabelledDocuments`)."""
    labels = None if task is None else task.targets(examples, path)
    spec = window_spec(config)
    if spec is not None:
        documents = encode_documents(tokenizer, [e.text for e in examples], spec)
        packed = documents.ids.row_lengths().numpy().astype(np.int64) + 2
        encoded = EncodedTexts(documents.ids, None, packed)
        return LabelledDocuments(path, examples, labels, encoded, documents=documents)
    pairs = None
    if config.data.text_pair_column:
        pairs = [e.text_pair for e in examples]
    encoded = encode_texts(tokenizer, [e.text for e in examples], pairs)
    return LabelledData(path, examples, labels, encoded)


def window_spec(config: RunConfig) -> WindowSpec | None:
    """How `--long-documents chunk` cuts the texts; None with `truncate`. Refuses what chunking
    cannot do: text pairs (see `bertfit.text.windows`), and a streamed or prepared `--train`,
    whose shards hold each row's ids already cut at max_seq_length."""
    spec = WindowSpec.for_model(config.model)
    if spec is None:
        return None
    if config.data.text_pair_column:
        raise ConfigError(
            f"--long-documents chunk windows one text per document; --text-pair-column "
            f"{config.data.text_pair_column} gives pairs, which are not windowed (no choice of "
            "which text to cut suits every task). Put both texts in one column, or use "
            "--long-documents truncate."
        )
    if config.data.streaming or is_prepared(config.data.train):
        raise ConfigError(
            "--long-documents chunk needs whole documents, but a prepared or --streaming "
            "training set holds each row's ids already cut at --max-seq-length. Train on the "
            "data file without --streaming, or use --long-documents truncate."
        )
    if isinstance(config.data.buckets, list) and config.data.buckets != [
        config.model.max_seq_length
    ]:
        raise ConfigError(
            f"--buckets {','.join(map(str, config.data.buckets))}: with --long-documents chunk "
            f"every window is --max-seq-length {config.model.max_seq_length} long and the "
            "buckets are chunk counts (1, 2, 4, ... --max-chunks). Leave --buckets out."
        )
    return spec


def class_weights(config: RunConfig, task: Task, targets: np.ndarray) -> np.ndarray | None:
    """The loss weight of each training example from `--class-weights`: "balanced" gives class
    c the weight n / (classes × n_c), a JSON file {label: weight} its own; None for "none"."""
    choice = config.train.class_weights
    if choice == NO_CLASS_WEIGHTS:
        return None
    if task.kind != SINGLE_LABEL:
        raise ConfigError(
            f"--class-weights applies to single-label tasks; this run is {task.kind}. Leave it out."
        )
    if choice == BALANCED:
        counts = np.bincount(targets, minlength=len(task.labels)).astype(np.float64)
        per_class = len(targets) / (len(task.labels) * np.maximum(counts, 1))
    else:
        per_class = _weights_file(choice, task)
    return per_class[targets].astype(np.float32)


def _weights_file(path: str, task: Task) -> np.ndarray:
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"--class-weights {path}: expected {BALANCED!r}, {NO_CLASS_WEIGHTS!r} or a JSON file "
            f'{{"label": weight, ...}} ({e}).'
        ) from None
    if (
        not isinstance(values, dict)
        or set(values) != set(task.labels)
        or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            for v in values.values()
        )
    ):
        raise ConfigError(
            f"--class-weights {path}: give one positive number for each label "
            f'{list(task.labels)}, as {{"label": weight, ...}}.'
        )
    return np.asarray([values[label] for label in task.labels], np.float64)
