"""What a classifier takes as texts, checked before anything tokenizes them: shared by every engine
(`bertfit.inference.predictor` in TensorFlow, `bertfit.inference.onnx_runtime` in ONNX Runtime),
so both refuse the same inputs with the same words. No TensorFlow here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from bertfit.errors import ConfigError, InputFormatError

BATCH_SIZE = 64  # texts per model call
LENGTHS_CHUNK = 1024  # texts per call when counting tokens (bounds its memory)


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
