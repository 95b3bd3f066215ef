"""Three steps of each kind of run the TensorFlow tests train (`CASES`: every pooling, task and
head, and LoRA on an int8 base) on this process's Keras backend, from given initial weights.

    KERAS_BACKEND=jax python -m tests.training.backend_cases MODEL DIR

The test's own process (TensorFlow) runs first: `write_data` writes the cases' rows in DIR and
`take_all` each case's initial weights (`backend_steps.take_steps`); a JAX process restores
them and takes the same steps, one per host call, so each call reads the state the one before
donated and wrote back. DIR gets `<case>.<backend>.npz`: the losses, the gradient norms and
the trace counts."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import keras
import numpy as np

from bertfit.config import RunConfig
from tests.tiny import scored_rows, sentiment_rows, tagged_rows, write_jsonl
from tests.training import backend_steps

ROWS = 24  # 3 steps of batch 8

# name: (its rows, model settings, train settings) over `backend_steps.run_config`. A head's
# initial bias (--head-bias) is not here: both backends start from the same weights.
CASES = {
    # the unused pooler frozen: the trained weights are not all the trainable ones
    "single-label, mean pooling, balanced classes": (
        "single",
        {"pooling": "mean"},
        {"class_weights": "balanced"},
    ),
    # windows of long documents (two each) pooled by attention: the chunk head's weights
    "regression on chunked documents": (
        "long",
        {"long_documents": "chunk", "max_chunks": 2, "chunk_pooling": "attention"},
        {},
    ),
    # the [CLS] pooler; the base frozen in non-trainable int8 kernels, float32 adapters,
    # bfloat16 compute
    "multi-label, LoRA on int8, mixed_bf16": (
        "multi",
        {"lora_rank": 4, "base_precision": "int8", "precision": "mixed_bf16"},
        {},
    ),
}


def _file(directory: Path, rows: str) -> Path:
    return directory / f"{rows}.jsonl"


def write_data(directory: Path) -> None:
    """Every case's training rows, in `directory`."""
    data = {
        "single": sentiment_rows(ROWS, seed=11),
        "multi": tagged_rows(ROWS, seed=1),
        "long": [(" ".join([text] * 8), score) for text, score in scored_rows(ROWS, seed=3)],
    }
    for rows, values in data.items():
        write_jsonl(_file(directory, rows), values)


def case_config(case: str, model: Path, directory: Path) -> RunConfig:
    """The run of `case`: `backend_steps.run_config`'s, with one bucket (one compilation)."""
    rows, model_settings, train_settings = CASES[case]
    config = backend_steps.run_config(model, _file(directory, rows))
    return dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, **model_settings),
        data=dataclasses.replace(config.data, buckets=[16]),
        train=dataclasses.replace(config.train, **train_settings),
    )


def out_file(directory: Path, case: str, backend: str) -> Path:
    return directory / f"{case.replace(' ', '_').replace(',', '')}.{backend}.npz"


def take_all(model: Path, directory: Path) -> None:
    """Every case's steps on this process's backend, each from its initial weights."""
    backend = keras.backend.backend()
    for i, case in enumerate(CASES):
        config = case_config(case, model, directory)
        results = backend_steps.take_steps(config, directory / f"initial{i}")
        np.savez(out_file(directory, case, backend), **results)


if __name__ == "__main__":
    take_all(*map(Path, sys.argv[1:3]))
