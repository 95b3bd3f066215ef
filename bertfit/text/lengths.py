"""The arithmetic of packing and of long-document windows, which the in-graph tokenizers
(TensorFlow, `packing.py` and `windows.py`) and the host tokenizer (NumPy, `host_packing.py`)
share: the padding choices, how many ids of each segment of a pair Hugging Face keeps, and how
documents are cut into windows (`WindowSpec`). No TensorFlow here: an `xp` argument names the
array module that computes (`numpy` or `tensorflow`, which both have `minimum`, `maximum` and
`where`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from bertfit.config import CHUNK
from bertfit.errors import ConfigError

PADDINGS = ("max_length", "longest")


def check_padding(padding: str) -> None:
    if padding not in PADDINGS:
        raise ConfigError(f"padding={padding!r} is not one of {PADDINGS}.")


def check_max_seq_length(max_seq_length: int, special_tokens: int) -> None:
    if not isinstance(max_seq_length, int) or max_seq_length < special_tokens:
        raise ConfigError(
            f"max_seq_length must be an int of at least {special_tokens} (room for the "
            f"special tokens), got {max_seq_length!r}."
        )


def check_max_chunks(max_chunks: int) -> None:
    if not isinstance(max_chunks, int) or max_chunks < 1:
        raise ConfigError(f"max_chunks must be an int of at least 1, got {max_chunks!r}.")


def truncation_lengths(len_a, len_b, budget: int, xp=np) -> tuple:
    """How many ids of each segment HF's `longest_first` keeps when the pair has `budget` room.

    Like the Rust `tokenizers` crate: if the pair is too long, the shorter segment (the first on
    a tie) keeps `min(its length, budget // 2)` ids and the other one takes the rest.

    Args:
        len_a: lengths of the first segments.
        len_b: lengths of the second segments.
        budget: room for both, `max_seq_length - 3`.
        xp: the array module that computes: NumPy (the host), or TensorFlow (the graph).

    Examples:
    >>> keep_a, keep_b = truncation_lengths(np.array([9, 2]), np.array([9, 9]), budget=5)
    >>> keep_a.tolist(), keep_b.tolist()
    ([2, 2], [3, 3])
    """
    first_is_shorter = len_a <= len_b
    shorter_keeps = xp.minimum(xp.minimum(len_a, len_b), budget // 2)
    longer_keeps = budget - shorter_keeps
    fits = len_a + len_b <= budget
    keep_a = xp.where(fits, len_a, xp.where(first_is_shorter, shorter_keeps, longer_keeps))
    keep_b = xp.where(fits, len_b, xp.where(first_is_shorter, longer_keeps, shorter_keeps))
    return keep_a, keep_b


WINDOW_MASK = "window_mask"  # [batch, K]: 1 on a document's real windows
WINDOWS = "windows"  # [batch]: windows the whole document needs (before the max_chunks cut)
DROPPED_TOKENS = "dropped_tokens"  # [batch]: ids after the last kept window


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """How documents are cut: window length, overlap and the most windows kept.

    Args:
        max_seq_length: each window's packed length, special tokens included.
        stride: ids shared by two consecutive windows (0: windows side by side).
        max_chunks: the most windows a document keeps (K).

    Examples:
    >>> spec = WindowSpec(max_seq_length=6, stride=1, max_chunks=3)
    >>> spec.content, spec.step, spec.windows_needed(np.array([0, 4, 5, 11])).tolist()
    (4, 3, [1, 1, 2, 4])
    """

    max_seq_length: int
    stride: int = 0
    max_chunks: int = 8

    def __post_init__(self):
        if not isinstance(self.max_seq_length, int) or self.max_seq_length < 3:
            raise ConfigError(
                f"max_seq_length must be an int of at least 3 to hold windows, got "
                f"{self.max_seq_length!r}."
            )
        if not isinstance(self.stride, int) or not 0 <= self.stride < self.content:
            raise ConfigError(
                f"chunk_stride must be an int in [0, {self.content}) (the overlap of two "
                f"windows of {self.content} ids at max_seq_length {self.max_seq_length}), "
                f"got {self.stride!r}; lower --chunk-stride."
            )
        check_max_chunks(self.max_chunks)

    @classmethod
    def for_model(cls, model) -> WindowSpec | None:
        """The windows of a run's `ModelConfig`: None unless `long_documents` is "chunk".

        >>> from bertfit.config import ModelConfig
        >>> WindowSpec.for_model(ModelConfig(max_seq_length=130, long_documents="chunk"))
        WindowSpec(max_seq_length=130, stride=32, max_chunks=8)
        >>> WindowSpec.for_model(ModelConfig()) is None
        True
        """
        if model.long_documents != CHUNK:
            return None
        stride = (
            (model.max_seq_length - 2) // 4 if model.chunk_stride is None else model.chunk_stride
        )
        return cls(model.max_seq_length, stride=stride, max_chunks=model.max_chunks)

    @property
    def content(self) -> int:
        """Text ids per window (the rest is `[CLS]` and `[SEP]`)."""
        return self.max_seq_length - 2

    @property
    def step(self) -> int:
        """Ids from one window's start to the next one's."""
        return self.content - self.stride

    def windows_needed(self, lengths, xp=np):
        """Windows covering texts of these id counts whole (1 for an empty text), computed
        by `xp`: NumPy (any sequence of lengths), or TensorFlow in the graph (int64 lengths)."""
        if xp is np:
            lengths = np.asarray(lengths)
        over = xp.maximum(lengths - self.content, 0)
        return 1 + (over + self.step - 1) // self.step
