"""`bertfit evaluate --backend jax` and `bertfit predict --backend jax`: a run's classifier whose
forward pass runs on the JAX devices (a TPU v6e or TPU7x, which TensorFlow cannot drive, a GPU,
or the CPU), giving the outputs, files and metrics of TensorFlow's (`inference/predictor.py`).

    clf = JaxClassifier("runs/sst")             # a run directory, trained on either backend
    bertfit.inference.run.evaluate(clf, "test.csv")

The texts go the way a run's evaluation goes in `bertfit train --backend jax`: the run's
tokenizer on the host and its NumPy batches (`encode_labelled`, `input`: full global
batches at the run's length buckets, or documents in windows with `--long-documents chunk`),
then one `jax.jit`-ted predict step (one compile per bucket shape), each batch split along its
rows over this host's devices (`jax_devices.DeviceSplit`). The model is the run's checkpoint as
`restored_model` restores it for TensorFlow (one checkpoint format: `bertfit.runs.weights`).
The step gives the logits, and `logit_outputs` gives them the meaning TensorFlow's graph
gives them (calibration, label names, thresholds, the targets' units). Nothing here comes from
`training/`, and nothing imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jax
import keras
import numpy as np

from bertfit.config import JAX_BACKEND
from bertfit.data.host_input import HostInput
from bertfit.data.labelled import encode_labelled
from bertfit.data.pipeline import INDEX, scatter_outputs
from bertfit.data.sources import Example
from bertfit.data.training_data import Batching
from bertfit.inference.outputs import logit_outputs
from bertfit.inference.run_model import restored_model, run_metadata
from bertfit.inference.texts import BATCH_SIZE, TextClassifier, checked_batch_size
from bertfit.jax_devices import DeviceSplit
from bertfit.model.inputs import features
from bertfit.runs.run_dir import open_run
from bertfit.tf_startup import select_keras_backend


class JaxClassifier(TextClassifier):
    """A run's classifier on Keras' JAX backend, with `Classifier`'s `outputs`, `predict` and
    `predict_proba` (rows in input order) and its `task`, `pairs` and `metadata`.

    Keras must run on JAX in the process (KERAS_BACKEND=jax before it is imported; the
    `bertfit` command sets it): in a process whose Keras runs on TensorFlow it is refused
    with that fix.

    Args:
        path: a run directory (local or a URL), trained on either backend; its best checkpoint
            is used.
        batch_size: texts per step (documents with `--long-documents chunk`, each
            `[max_chunks at most, max_seq_length]` windows), rounded up to a multiple of this
            host's JAX devices so that every device gets as many rows.
    """

    def __init__(self, path: str | Path, batch_size: int = BATCH_SIZE):
        select_keras_backend(JAX_BACKEND)  # a process whose Keras runs on TensorFlow: refused
        run_dir = open_run(path)
        self.config = run_dir.load_config()
        self.task = run_dir.load_task()
        self.metadata = run_metadata(self.config, self.task)
        self.labels: list[str] = list(self.task.labels)
        self.pairs: bool = self.metadata["pairs"]
        self.tokenizer = run_dir.load_host_tokenizer()
        self.split = DeviceSplit(jax.local_devices())
        self.batch_size = -(-checked_batch_size(batch_size) // self.split.replicas)
        self.batch_size *= self.split.replicas
        with self.split.scope():
            self.model = restored_model(run_dir, self.config, self.task)
        self.model.built = True  # every weight is the checkpoint's: stateless_call may run
        self._traces = 0
        # gathered on every device: each process reads all rows back (several hosts)
        self._logits_step = jax.jit(
            self._logits,
            out_shardings=self.split.gathered,
            compiler_options=self.split.compiler_options,
        )

    def _logits(self, trainable, non_trainable, inputs):
        self._traces += 1  # the Python body runs only when jit traces
        logits, _ = self.model.stateless_call(trainable, non_trainable, inputs, training=False)
        return keras.ops.cast(logits, "float32")

    def outputs(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, progress=None
    ) -> dict[str, np.ndarray]:
        """Every output of the model by name (see `bertfit.inference.outputs`), rows in input
        order, as `Classifier.outputs` gives them."""
        texts, text_pairs = self.checked_texts(texts, text_pairs)
        return logit_outputs(self.task, self.logits(texts, text_pairs, progress))

    def logits(self, texts: list[str], text_pairs: list[str] | None, progress=None) -> np.ndarray:
        """The model's float32 logits [texts, outputs] for checked texts, in input order."""
        if not texts:
            return np.zeros((0, self.task.num_outputs), np.float32)
        pairs = text_pairs or [None] * len(texts)
        examples = [
            Example(text, pair, None, line)
            for line, (text, pair) in enumerate(zip(texts, pairs, strict=True), start=1)
        ]
        data = encode_labelled("texts", examples, self.config, self.tokenizer, None)
        buckets = tuple(self.metadata["buckets"])
        batching = Batching.of(self.config, buckets, training=False, batch_size=self.batch_size)
        # no strategy: whole global batches in NumPy, split here over the devices
        batches = data.input(batching, None, special_ids=self.tokenizer.special_ids, shuffle=False)
        if progress is not None:  # made for batches of batch_size texts by the caller
            progress.total = max(len(batches), 1)
        return scatter_outputs(self._steps(batches), len(data), progress)

    def _steps(self, batches: HostInput):
        """Each batch's float32 logits and example indices, in the plan's order."""
        trainable = [v.value for v in self.model.trainable_variables]
        non_trainable = [v.value for v in self.model.non_trainable_variables]
        iterators = batches.iterators()
        for batch in batches.plan:
            element = next(iterators[batch.seq_length])
            inputs = self.split.put(features(element))
            with self.split.random_bits():
                logits = self._logits_step(trainable, non_trainable, inputs)
            yield np.asarray(logits), np.asarray(element[INDEX])

    def trace_counts(self) -> dict[str, int]:
        """How often the predict step was traced (and compiled): once per bucket shape."""
        return {"predict_step": self._traces}
