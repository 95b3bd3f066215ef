"""What every engine's classifier shares (`bertfit.inference.predictor` in TensorFlow,
`bertfit.inference.onnx_runtime` in ONNX Runtime): the texts it takes, checked before anything
tokenizes them, so both refuse the same inputs with the same words, and `predict` and
`predict_proba` on top of each engine's `outputs` (`TextClassifier`). No TensorFlow here."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from bertfit.data.tasks import REGRESSION, Task
from bertfit.errors import ConfigError, InputFormatError
from bertfit.inference.outputs import prediction_rows

BATCH_SIZE = 64  # texts per model call
LENGTHS_CHUNK = 1024  # texts per call when counting tokens (bounds its memory)
# What one more model call costs, in padded tokens: MiniLM-L6 in ONNX Runtime takes ~3 ms a
# call besides ~0.34 ms a token on one core (a larger encoder: fewer tokens' worth).
CALL_TOKENS = 8


def checked_batch_size(batch_size) -> int:
    """`batch_size` (texts per model call), or a `ConfigError` saying what it must be."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise ConfigError(f"batch_size must be a whole number of texts, got {batch_size!r}.")
    if batch_size < 1:
        raise ConfigError(
            f"batch_size must be at least 1 (texts per model call), got {batch_size}; "
            f"leave it out for the default {BATCH_SIZE}."
        )
    return int(batch_size)


def length_groups(lengths: Sequence[int], call_tokens: int = CALL_TOKENS) -> list[np.ndarray]:
    """The rows of one batch as model calls of similar lengths: row indices sorted by length
    (ties in their order), cut into runs so that padding each run to its longest row and
    `call_tokens` a run cost the fewest tokens in all (exactly: a shortest path over the cuts).

    A served batch holds whatever texts arrived together; padded as one call, 16 snippets of
    Rotten Tomatoes fill 1.8 times the tokens they have.

    >>> [g.tolist() for g in length_groups([30, 5, 31, 6], call_tokens=8)]
    [[1, 3], [0, 2]]
    >>> [g.tolist() for g in length_groups([30, 5, 31, 6], call_tokens=100)]
    [[1, 3, 0, 2]]
    """
    lengths = np.asarray(lengths, np.int64)
    order = np.argsort(lengths, kind="stable")
    widths = lengths[order]
    cost = np.zeros(len(order) + 1)  # cost[end]: the best cuts of the first `end` rows
    cut = np.zeros(len(order) + 1, np.int64)  # where the last run of those begins
    for end in range(1, len(order) + 1):
        starts = np.arange(end)
        totals = cost[:end] + call_tokens + (end - starts) * widths[end - 1]
        cut[end] = np.argmin(totals)
        cost[end] = totals[cut[end]]
    groups, end = [], len(order)
    while end:
        groups.append(order[cut[end] : end])
        end = cut[end]
    return groups[::-1]


def length_lanes(lengths: Sequence[int], lanes: int) -> list[list[np.ndarray]]:
    """The rows of one batch for `lanes` model calls at once: row indices sorted by length, cut
    into `lanes` runs of about as many tokens (the shortest rows in the first), each run as its
    `length_groups`, one call after another. No empty lanes.

    >>> [[g.tolist() for g in lane] for lane in length_lanes([10] * 6 + [40, 40], lanes=2)]
    [[[0, 1, 2, 3, 4, 5]], [[6, 7]]]
    >>> [[g.tolist() for g in lane] for lane in length_lanes([30, 5, 31, 6], lanes=1)]
    [[[1, 3], [0, 2]]]
    """
    lengths = np.asarray(lengths, np.int64)
    order = np.argsort(lengths, kind="stable")
    tokens = np.cumsum(lengths[order])
    total = tokens[-1] if len(tokens) else 0
    cuts = np.searchsorted(tokens, [total * k / lanes for k in range(1, lanes)], side="right")
    runs = [run for run in np.split(order, cuts) if len(run)]
    return [[run[group] for group in length_groups(lengths[run])] for run in runs]


def text_list(values, name: str) -> list:
    """`values` as a list of texts (str, or UTF-8 bytes), or an `InputFormatError` that says
    which item is not one."""
    if isinstance(values, (str, bytes)):
        raise InputFormatError(
            "predict takes a list of texts; wrap a single text in a list: clf.predict([text])."
        )
    if isinstance(values, np.ndarray) and values.ndim != 1:
        raise InputFormatError(
            f"{name} is a {values.ndim}-D array of shape {values.shape}; pass a list or a 1-D "
            "array of strings, one per text."
        )
    if not isinstance(values, Iterable) or isinstance(values, Mapping):
        raise InputFormatError(
            f"{name} must be a list of strings, got {type(values).__name__} {values!r:.60}."
        )
    values = list(values)
    for index, value in enumerate(values):
        if not isinstance(value, (str, bytes)):
            raise InputFormatError(
                f"{name}[{index}] is {type(value).__name__} {value!r:.60}, not a string; pass "
                "one string per text ('' for a missing one)."
            )
        problem = text_problem(value)
        if problem is not None:
            raise InputFormatError(f"{name}[{index}] {problem}; pass valid Unicode text.")
    return values


def text_problem(text: str | bytes) -> str | None:
    """Why the tokenizer cannot take `text`, or None: a str must encode as UTF-8 (a lone
    surrogate such as '\\ud800' does not), bytes must be UTF-8.

    >>> text_problem("caf\\u00e9") is None
    True
    >>> text_problem("a\\ud800")
    "has a lone surrogate '\\\\ud800' at character 1, which is not valid Unicode"
    """
    try:
        if isinstance(text, str):
            text.encode("utf-8")
        else:
            bytes(text).decode("utf-8")
    except UnicodeError as e:
        bad = e.object[e.start : e.end]
        if isinstance(text, str):
            return (
                f"has a lone surrogate {ascii(bad[:1])} at character {e.start}, "
                "which is not valid Unicode"
            )
        return f"is not valid UTF-8 (byte 0x{bad[:1].hex()} at offset {e.start})"
    return None


class TextClassifier(abc.ABC):
    """`predict` and `predict_proba` for an engine's classifier, which gives `outputs` (every
    output by name, rows in input order) and has `task` and `pairs`."""

    task: Task
    pairs: bool

    @abc.abstractmethod
    def outputs(self, texts, text_pairs=None, progress=None) -> dict[str, np.ndarray]:
        """Every output by name, one row per text in input order (each engine's own run)."""

    def predict_proba(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, progress=None
    ) -> np.ndarray:
        """Probabilities [len(texts), labels] (float32), rows in input order: softmax over the
        classes, or one sigmoid per label (multi-label)."""
        if self.task.kind == REGRESSION:
            raise InputFormatError(
                "a regression model has no probabilities; use predict() or outputs()['value']."
            )
        return self.outputs(texts, text_pairs, progress)["probabilities"]

    def predict(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, progress=None
    ) -> list[dict]:
        """One row per text, in input order: `{"label", "probabilities"}` (single-label),
        `{"labels", "probabilities"}` (multi-label) or `{"value"}` (regression)."""
        return prediction_rows(self.task, self.outputs(texts, text_pairs, progress))

    def checked_texts(self, texts, text_pairs) -> tuple[list, list | None]:
        """The texts (and pairs) as lists, or an `InputFormatError` that says what is wrong:
        not texts, pairs where the model takes none (or none where it does), counts apart."""
        texts = text_list(texts, "texts")
        if self.pairs != (text_pairs is not None):
            raise InputFormatError(
                "this classifier takes text pairs: pass text_pairs=[...] beside the texts."
                if self.pairs
                else "this classifier takes single texts, not text pairs."
            )
        if text_pairs is not None:
            text_pairs = text_list(text_pairs, "text_pairs")
            if len(text_pairs) != len(texts):
                raise InputFormatError(
                    f"{len(texts)} texts but {len(text_pairs)} text pairs; pass one pair per text."
                )
        return texts, text_pairs
