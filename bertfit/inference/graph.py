"""A fine-tuned classifier as one TensorFlow graph: raw strings in, probabilities and labels out.

`ClassifierModule` holds the in-graph tokenizer, the classifier and the label names; every way of
using a trained classifier runs it: `bertfit.inference.predictor` in memory, `bertfit serve`, and
`bertfit export` (`bertfit.export.serving`), which saves it as a SavedModel in TF Serving's layout
(`OUT/<version>/`) that loads with plain `tf.saved_model.load` (plus `import tensorflow_text` for
the tokenizer's ops); bertfit is not needed to use it. Its signatures:

- `serving_default`: `text` (string [batch]; and `text_pair` for a pair model) → the task's
  outputs (`bertfit.inference.outputs`): `probabilities` (float32 [batch, labels]), `label`
  (string [batch]) and `label_id` (int32) for single-label models.
- `classify` (single- and multi-label models) and `regress` (regression), for TF Serving's
  Classify and Regress APIs (method names `tensorflow/serving/classify|regress`): `inputs`
  (string [batch], serialized `tf.train.Example`s with a bytes feature `text`, and `text_pair`
  for a pair model) → `classes` (string [batch, labels], the label names) and `scores` (float32
  [batch, labels], the probabilities), or `outputs` (float32 [batch], the value).
- `classify_ids`: the three int32 inputs `input_word_ids`, `input_mask`, `input_type_ids`
  ([batch, seq]) → the same outputs, for clients that tokenize themselves. Inputs the model
  cannot read (the three of different shapes, ids outside the vocabulary, type ids outside the
  type vocabulary, rows longer than the position table) fail with an `InvalidArgumentError`
  that says so, before the model runs: on a GPU an id outside the table would silently read
  zeros.

An empty batch gives empty outputs of the right shapes.

Besides the signatures, the module keeps `vocab_size`, `type_vocab_size` and `max_length`
(int32 scalar variables; `max_length` is -1 when the encoder has no length limit), the limits
`classify_ids` checks, so that a server can check requests before batching them; and
`token_lengths` (the same text inputs → int32 [batch], tokens per row before truncation), with
which `bertfit.inference.predictor` groups texts of similar length into a batch.

Texts are truncated to the run's `max_seq_length` inside the graph; a batch is padded to the
smallest length bucket that holds its longest row, so the shapes the model sees are few.

A run trained with `--long-documents chunk` (`windows`: a `bertfit.text.windows.WindowSpec`)
keeps the same signatures, but its graph classifies whole documents: each text is tokenized once
and cut into overlapping windows (`window_ids`); the batch becomes `[batch, K, seq]` windows
with a `window_mask`, K the smallest chunk-count bucket (`bertfit.data.windowed.chunk_buckets`)
that holds the batch's most windows and seq the smallest length bucket that holds its longest
window, and the `ChunkedClassifier` pools each document's real windows into one row of outputs.
A document needing more than `max_chunks` windows keeps its first `max_chunks`, as in training.
`classify_ids` rows are documents of one window each (ids a client packed itself).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import tensorflow as tf

from bertfit.data.buckets import bucket_lengths
from bertfit.data.tasks import REGRESSION, Task
from bertfit.data.windowed import chunk_buckets
from bertfit.errors import ConfigError
from bertfit.inference.outputs import task_outputs
from bertfit.model.inputs import INPUT_NAMES, MASK, TYPE_IDS, WORD_IDS
from bertfit.model.tracking import hold_keras_model
from bertfit.text.tokenizer import BertTokenizer
from bertfit.text.windows import WINDOW_MASK, WindowSpec, window_ids

DEFAULT_SIGNATURE = "serving_default"
IDS_SIGNATURE = "classify_ids"
CLASSIFY_SIGNATURE = "classify"  # TF Serving's Classify API (single- and multi-label)
REGRESS_SIGNATURE = "regress"  # TF Serving's Regress API (regression)
# An export on disk: ROOT/<version>/ holds the SavedModel and, beside it, what a loaded classifier
# needs to know besides the graph (`bertfit.inference.predictor.run_metadata`).
METADATA_FILE = "assets.extra/bertfit.json"  # TF Serving ignores assets.extra/


def _text_spec(name: str) -> tf.TensorSpec:
    return tf.TensorSpec([None], tf.string, name=name)


def _ids_specs() -> list[tf.TensorSpec]:
    return [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]


class ClassifierModule(tf.Module):
    """Tokenizer + classifier + label names, with the serving signatures as tf.functions.

    Args:
        model: a `BertClassifier` (any Keras model taking the three int32 inputs), or a
            `ChunkedClassifier` with `windows`.
        tokenizer: the run's `BertTokenizer`.
        task: what the outputs mean (`bertfit.data.tasks.Task`: kind, label names, threshold,
            target scale).
        max_seq_length: texts are truncated to this many tokens, special tokens included.
        buckets: the sequence lengths a batch is padded to (the largest is `max_seq_length`).
        pairs: whether the model classifies text pairs (`text`, `text_pair`).
        windows: how documents are cut into windows for a `ChunkedClassifier`
            (`WindowSpec.for_model`), or None: texts are truncated.
    """

    def __init__(
        self,
        model,
        tokenizer: BertTokenizer,
        task: Task,
        max_seq_length: int,
        buckets: list[int],
        pairs: bool = False,
        windows: WindowSpec | None = None,
    ):
        super().__init__(name="bertfit_classifier")
        if windows is not None and pairs:
            raise ConfigError(
                "--long-documents chunk windows one text per document; a text-pair model "
                "cannot be windowed. Use --long-documents truncate."
            )
        self.windows = windows
        # The model's tf.Variables, not its Keras layers, in the SavedModel: else TensorFlow's
        # Session loader (TF Serving) restores weights that the signatures never read.
        hold_keras_model(self, "model", model)
        self.tokenizer = tokenizer
        self.task = task
        self.label_names = tf.Variable(
            list(task.labels),
            trainable=False,
            dtype=tf.string,
            name="label_names",
            shape=[len(task.labels)],
        )
        self.max_seq_length = max_seq_length
        self.limits = IdLimits.of_model(model)
        for name, value in self.limits.as_dict().items():
            value = -1 if value is None else value
            setattr(self, name, tf.Variable(value, trainable=False, dtype=tf.int32, name=name))
        self.buckets = list(bucket_lengths(buckets, max_seq_length))
        self.pairs = pairs
        # No autograph: nothing here branches on a tensor, and converting costs seconds of the
        # first prediction.
        traced = functools.partial(tf.function, autograph=False)
        if pairs:
            text_specs = [_text_spec("text"), _text_spec("text_pair")]
            self.classify_text = traced(self._classify_pairs, input_signature=text_specs)
            self.token_lengths = traced(self._pair_token_lengths, input_signature=text_specs)
        else:
            text_specs = [_text_spec("text")]
            self.classify_text = traced(self._classify_texts, input_signature=text_specs)
            self.token_lengths = traced(self._token_lengths, input_signature=text_specs)
        self.classify_ids = traced(self._classify_ids, input_signature=_ids_specs())
        # TF Serving's Classify or Regress API, whichever the task has (saving traces every
        # tf.function of the module, so the other one is not defined).
        examples = [_text_spec("inputs")]
        if task.kind == REGRESSION:
            self.regress_examples = traced(self._regress_examples, input_signature=examples)
        else:
            self.classify_examples = traced(self._classify_examples, input_signature=examples)
        self.pack = traced(self._pack)

    def serving_signatures(self) -> dict:
        """The SavedModel signatures, as concrete functions (the same objects a loaded
        SavedModel lists under `.signatures`)."""
        by_examples = (
            {REGRESS_SIGNATURE: self.regress_examples}
            if self.task.kind == REGRESSION
            else {CLASSIFY_SIGNATURE: self.classify_examples}
        )  # the one the task has
        return {
            DEFAULT_SIGNATURE: self.classify_text.get_concrete_function(),
            IDS_SIGNATURE: self.classify_ids.get_concrete_function(),
            **{name: f.get_concrete_function() for name, f in by_examples.items()},
        }

    def _example_outputs(self, inputs):
        """The task's outputs for serialized tf.Examples holding `text` (and `text_pair`)."""
        names = ["text", "text_pair"] if self.pairs else ["text"]
        features = tf.io.parse_example(
            inputs, {name: tf.io.FixedLenFeature([], tf.string) for name in names}
        )
        texts = [features[name] for name in names]
        return self._classify_pairs(*texts) if self.pairs else self._classify_texts(*texts)

    def _classify_examples(self, inputs):
        scores = self._example_outputs(inputs)["probabilities"]
        classes = tf.broadcast_to(self.label_names, tf.shape(scores))
        return {"classes": classes, "scores": scores}

    def _regress_examples(self, inputs):
        return {"outputs": self._example_outputs(inputs)["value"]}

    def _classify_texts(self, text):
        ids = self.tokenizer.tokenize(text)
        return self._classify(self._pack(ids) if self.windows is None else self._window(ids))

    def _classify_pairs(self, text, text_pair):
        return self._classify(
            self._pack(self.tokenizer.tokenize(text), self.tokenizer.tokenize(text_pair))
        )

    def _token_lengths(self, text):
        return tf.cast(self.tokenizer.tokenize(text).row_lengths(), tf.int32)

    def _pair_token_lengths(self, text, text_pair):
        return self._token_lengths(text) + self._token_lengths(text_pair)

    def _classify_ids(self, input_word_ids, input_mask, input_type_ids):
        inputs = {WORD_IDS: input_word_ids, MASK: input_mask, TYPE_IDS: input_type_ids}
        with tf.control_dependencies(self._id_checks(inputs)):
            inputs = {name: tf.identity(value) for name, value in inputs.items()}
        if self.windows is not None:  # each row a document of one window
            inputs = {name: value[:, tf.newaxis, :] for name, value in inputs.items()}
            inputs[WINDOW_MASK] = tf.ones_like(inputs[WORD_IDS][:, :, 0])
        return self._classify(inputs)

    def _id_checks(self, inputs: dict) -> list:
        """Asserts that the model can read `inputs` (see the module's docstring)."""
        ids, limits = inputs[WORD_IDS], self.limits
        shape = tf.shape(ids)
        checks = [
            tf.debugging.assert_equal(
                tf.shape(inputs[name]),
                shape,
                message=f"{name} must have the shape of {WORD_IDS} [batch, seq]",
            )
            for name in (MASK, TYPE_IDS)
        ]
        checks.append(
            tf.debugging.assert_greater(
                shape[1], 0, message=f"{WORD_IDS} must have at least one id per row"
            )
        )
        type_ids = None if limits.type_vocab_size is None else max(limits.type_vocab_size, 1)
        ranges = [
            (WORD_IDS, limits.vocab_size, "the vocabulary size"),
            (TYPE_IDS, type_ids, "the type vocabulary size"),
        ]
        for name, size, what in ranges:
            checks.append(
                tf.debugging.assert_non_negative(inputs[name], message=f"{name} must be >= 0")
            )
            if size is not None:
                checks.append(
                    tf.debugging.assert_less(
                        inputs[name], size, message=f"{name} must be < {size} ({what})"
                    )
                )
        if limits.max_length is not None:
            checks.append(
                tf.debugging.assert_less_equal(
                    shape[1],
                    limits.max_length,
                    message=f"rows must be at most {limits.max_length} ids long "
                    "(the encoder's position table)",
                )
            )
        return checks

    def _pack(self, ids_a, ids_b=None):
        """Packs to the longest row (at most `max_seq_length`), then pads to its bucket; no rows
        pack to [0, smallest bucket]."""
        inputs = self.tokenizer.pack(
            ids_a, ids_b, max_seq_length=self.max_seq_length, padding="longest"
        )
        longest = tf.shape(inputs[WORD_IDS])[1]
        length = smallest_bucket(self.buckets, longest)
        pad = {WORD_IDS: self.tokenizer.pad_id, MASK: 0, TYPE_IDS: 0}
        return {
            name: tf.pad(value, [[0, 0], [0, length - longest]], constant_values=pad[name])
            for name, value in inputs.items()
        }

    def _window(self, ids):
        """Cuts documents' ids into windows `[batch, K, seq]` (see the module docstring): K
        the smallest chunk-count bucket holding the batch's most windows, seq the smallest
        length bucket holding its longest window (the slices cut only padding)."""
        inputs = window_ids(ids, self.windows, **self.tokenizer.special_ids)  # K = max_chunks
        most = tf.reduce_max(tf.reduce_sum(inputs[WINDOW_MASK], axis=1))
        longest = tf.reduce_max(tf.reduce_sum(inputs[MASK], axis=2))
        k = smallest_bucket(chunk_buckets(self.windows.max_chunks), most)
        length = smallest_bucket(self.buckets, longest)
        windows = {name: inputs[name][:, :k, :length] for name in INPUT_NAMES}
        return {**windows, WINDOW_MASK: inputs[WINDOW_MASK][:, :k]}

    def _classify(self, inputs):
        # An empty batch does not reach the model (its attention's reshapes cannot infer a
        # size from no elements): it gets [0, outputs] logits.
        logits = tf.cond(
            tf.shape(inputs[WORD_IDS])[0] > 0,
            lambda: tf.cast(self.model(inputs, training=False), tf.float32),
            lambda: tf.zeros([0, self.task.num_outputs], tf.float32),
        )
        return task_outputs(self.task, logits, self.label_names)


def smallest_bucket(buckets, size) -> tf.Tensor:
    """The smallest of `buckets` that holds `size` (a scalar int tensor; an empty batch's
    maximum, the lowest int, gets the smallest bucket; a size past them all, the largest).
    A minimum, not a search: LiteRT has builtins for these ops and none for `searchsorted`."""
    buckets = tf.constant(sorted(buckets), tf.int32)
    return tf.reduce_min(tf.where(buckets >= tf.cast(size, tf.int32), buckets, buckets[-1]))


@dataclasses.dataclass(frozen=True)
class IdLimits:
    """What `classify_ids` accepts: ids below `vocab_size`, type ids below `type_vocab_size`
    (0 only when it is 0 or 1), rows of at most `max_length` ids; `None` for no limit known."""

    vocab_size: int | None = None
    type_vocab_size: int | None = None
    max_length: int | None = None

    @classmethod
    def of_model(cls, model) -> IdLimits:
        """From a `BertClassifier`'s (or a `ChunkedClassifier`'s) encoder config; no limits for
        another kind of model."""
        config = getattr(getattr(model, "encoder", None), "config", None)
        if config is None:
            return cls()
        return cls(config.vocab_size, config.type_vocab_size, config.max_sequence_length)

    @classmethod
    def of_module(cls, module) -> IdLimits:
        """From a `ClassifierModule` or a loaded export (no limits for an export written before
        they were saved in it)."""
        if isinstance(module, ClassifierModule):
            return module.limits

        def value(name):
            variable = getattr(module, name, None)
            number = None if variable is None else int(variable.numpy())
            return None if number is None or number < 0 else number

        return cls(**{field.name: value(field.name) for field in dataclasses.fields(cls)})

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def next_version(root: Path) -> int:
    """1 for a new folder, else one more than the largest numeric version in it."""
    versions = (
        [int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit()]
        if root.is_dir()
        else []
    )
    return max(versions, default=0) + 1
