"""The encoder's input contract: three int32 tensors under the TF Hub names.

Hugging Face and KerasHub names are accepted and renamed; raw strings and unknown keys are refused
with a message that says what to pass instead.
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
import numpy as np

from bertfit.errors import InputFormatError

WORD_IDS, MASK, TYPE_IDS = "input_word_ids", "input_mask", "input_type_ids"
INPUT_NAMES = (WORD_IDS, MASK, TYPE_IDS)

# A packed batch (`--packing`, bertfit.data.packed) holds several examples per row: its
# `input_mask` numbers each token's example in the row (1, 2, ...; 0 on padding), and two more
# inputs say where each example lies: every token's position within its example [batch, seq]
# and each example slot's first token [batch, slots] (0 for an empty slot).
POSITIONS, STARTS = "input_positions", "example_starts"
PACKED_NAMES = (POSITIONS, STARTS)

# The other keys of a batch from bertfit's input pipeline (bertfit.data.pipeline): each row's
# example index (-1 on padding rows), its weight in the loss (0 on padding rows), its target,
# and the real examples of the whole global batch. The model reads its inputs and leaves these
# to the loss, so `model(batch)` works.
INDEX, WEIGHT, LABEL = "index", "example_weight", "label"
GLOBAL_EXAMPLES = "global_examples"
WINDOW_MASK = "window_mask"  # a windowed document's real windows (bertfit.text.windows writes it)
PIPELINE_KEYS = frozenset({LABEL, WEIGHT, INDEX, GLOBAL_EXAMPLES})

# Every accepted spelling of each input, by convention.
ALIASES = {
    "input_word_ids": WORD_IDS,
    "input_ids": WORD_IDS,
    "token_ids": WORD_IDS,
    "input_mask": MASK,
    "attention_mask": MASK,
    "padding_mask": MASK,
    "input_type_ids": TYPE_IDS,
    "token_type_ids": TYPE_IDS,
    "segment_ids": TYPE_IDS,
}

TOKENIZE_HINT = (
    "Tokenize first:\n"
    "    encoder, tokenizer = bertfit.load_encoder(path)\n"
    "    outputs = encoder(tokenizer(['a sentence', 'another one'], max_seq_length=128))"
)


def is_text(value) -> bool:
    """True for a str, a list of str, a string numpy array or a string tensor."""
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, (list, tuple)):
        return len(value) > 0 and all(is_text(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "USO"
    # A TensorFlow string tensor (dense or ragged), without importing TensorFlow on other backends.
    return getattr(getattr(value, "dtype", None), "name", None) == "string"


def expected_keys_message() -> str:
    return (
        f"The encoder expects a dict with {', '.join(INPUT_NAMES)} (int32, shape [batch, seq]); "
        "the Hugging Face names (input_ids, attention_mask, token_type_ids) and the KerasHub names "
        "(token_ids, padding_mask, segment_ids) are accepted too."
    )


def normalize_inputs(inputs) -> dict:
    """Renames, checks and casts encoder inputs to int32 `input_word_ids`, `input_mask` and
    `input_type_ids`.

    A missing `input_type_ids` becomes zeros (one segment). int64 ids are cast to int32, which is
    what TPUs support.
    """
    if is_text(inputs) or (
        isinstance(inputs, Mapping) and any(is_text(v) for v in inputs.values())
    ):
        raise InputFormatError("The encoder takes token ids, not raw strings. " + TOKENIZE_HINT)
    if not isinstance(inputs, Mapping):
        raise InputFormatError(
            f"Got a {type(inputs).__name__} where a dict of tensors was expected. "
            + expected_keys_message()
        )
    renamed: dict[str, object] = {}
    for key, value in inputs.items():
        if key in PIPELINE_KEYS:
            continue
        if key in PACKED_NAMES:
            renamed[key] = value
            continue
        if key not in ALIASES:
            raise InputFormatError(f"Unknown input key {key!r}. " + expected_keys_message())
        name = ALIASES[key]
        if name in renamed:
            raise InputFormatError(f"Two keys name the same input {name!r}: pass only one of them.")
        renamed[name] = value
    for name in (WORD_IDS, MASK):
        if name not in renamed:
            raise InputFormatError(f"Missing input {name!r}. " + expected_keys_message())
    word_ids = _as_int32(WORD_IDS, renamed[WORD_IDS])
    if TYPE_IDS not in renamed:
        renamed[TYPE_IDS] = keras.ops.zeros_like(word_ids)
    packed = [name for name in PACKED_NAMES if name in renamed]
    if packed and len(packed) < len(PACKED_NAMES):
        raise InputFormatError(
            f"A packed batch needs both {' and '.join(PACKED_NAMES)}; got {packed[0]!r} alone "
            "(bertfit.data.packed makes them)."
        )
    return {name: _as_int32(name, renamed[name]) for name in (*INPUT_NAMES, *packed)}


def is_packed(inputs: dict) -> bool:
    """Whether `inputs` (normalized) are a packed batch: several examples per row."""
    return POSITIONS in inputs


def _as_int32(name: str, value):
    """`value` as an int32 tensor; a symbolic Keras input (functional models) stays symbolic."""
    if not (keras.ops.is_tensor(value) or isinstance(value, keras.KerasTensor)):
        value = keras.ops.convert_to_tensor(value)
    dtype = keras.backend.standardize_dtype(value.dtype)
    if not (dtype.startswith(("int", "uint")) or dtype == "bool"):
        raise InputFormatError(
            f"Input {name!r} has dtype {dtype}; token ids and masks must be integers "
            "(int32, or int64 which bertfit casts to int32)."
        )
    if value.shape is not None and len(value.shape) != 2:
        raise InputFormatError(
            f"Input {name!r} has shape {tuple(value.shape)}; expected [batch, seq]. "
            "For a single sentence add a batch dimension."
        )
    return value if dtype == "int32" else keras.ops.cast(value, "int32")


def features(batch: dict) -> dict:
    """The model's inputs in a pipeline batch; windowed documents' window mask, or a packed
    batch's positions and example starts, too."""
    extra = [name for name in (WINDOW_MASK, *PACKED_NAMES) if name in batch]
    return {name: batch[name] for name in (*INPUT_NAMES, *extra)}
