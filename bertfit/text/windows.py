"""Cutting long texts into overlapping windows, in the graph: `[batch, K, seq]` model inputs.

For `--long-documents chunk` (issue 35): each text is tokenized once, its ids are cut into windows
of `max_seq_length - 2` ids that overlap by `stride` ids, and each window is packed like a single
text of the checkpoint (`[CLS] ... [SEP]`, `<s> ... </s>`) by `pack_inputs`. A document keeps
at most `max_chunks` windows; the ids after them are dropped and counted (`dropped_tokens`).
Rows `k >= windows` of a document are padding windows (`window_mask` 0): they hold `[CLS] [SEP]`
so the encoder sees a valid input, and the window pooling (`bertfit.model.chunked`) ignores them.

Pairs are refused for now: a window of a pair would have to choose which segment to cut, and
no choice is right for every task (put both texts in one column, or use `truncate`).
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from bertfit.config import CHUNK
from bertfit.errors import ConfigError
from bertfit.text.packing import pack_inputs

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
    >>> spec.content, spec.step, spec.windows_needed(tf.constant([0, 4, 5, 11])).numpy().tolist()
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
        if not isinstance(self.max_chunks, int) or self.max_chunks < 1:
            raise ConfigError(f"max_chunks must be an int of at least 1, got {self.max_chunks!r}.")

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

    def windows_needed(self, lengths) -> tf.Tensor:
        """Windows covering texts of these id counts whole (1 for an empty text)."""
        lengths = tf.cast(lengths, tf.int64)
        over = tf.maximum(lengths - self.content, 0)
        return 1 + (over + self.step - 1) // self.step


def window_ids(ids, spec: WindowSpec, *, max_chunks: int | None = None, **special_ids) -> dict:
    """Cuts token ids into packed windows.

    Args:
        ids: a `tf.RaggedTensor` `[batch, None]` of ids from a tokenizer's `tokenize`.
        spec: the window length, overlap and cap.
        max_chunks: the K of the output (a chunk-count bucket); `spec.max_chunks` by default.
            Documents that need more windows keep their first K.
        **special_ids: the tokenizer's `special_ids` (`cls_id`, `sep_id`, `pad_id`, ...).

    Returns:
        int32 `input_word_ids`, `input_mask`, `input_type_ids` `[batch, K, max_seq_length]`,
        `window_mask` `[batch, K]`, and per document `windows` (needed, before the cut) and
        `dropped_tokens`, `[batch]` each.

    Examples:
    >>> spec = WindowSpec(max_seq_length=5, stride=1, max_chunks=3)
    >>> out = window_ids(tf.ragged.constant([[7, 8, 9, 10, 11]]), spec, cls_id=1, sep_id=2)
    >>> out["input_word_ids"].numpy()[0].tolist(), out["window_mask"].numpy().tolist()
    ([[1, 7, 8, 9, 2], [1, 9, 10, 11, 2], [1, 2, 0, 0, 0]], [[1, 1, 0]])
    """
    k = spec.max_chunks if max_chunks is None else max_chunks
    if not isinstance(k, int) or k < 1:
        raise ConfigError(f"max_chunks must be an int of at least 1, got {k!r}.")
    ids = tf.cast(ids, tf.int32)
    lengths = ids.row_lengths()  # int64
    needed = spec.windows_needed(lengths)
    count = tf.minimum(needed, k)
    starts = tf.range(k, dtype=tf.int64) * spec.step  # [K]
    real = tf.range(k, dtype=tf.int64)[tf.newaxis, :] < count[:, tf.newaxis]  # [batch, K]
    keep = tf.where(real, tf.clip_by_value(lengths[:, tf.newaxis] - starts, 0, spec.content), 0)
    pad_id = special_ids.get("pad_id", 0)
    dense = tf.pad(ids.to_tensor(pad_id), [[0, 0], [0, spec.content]], constant_values=pad_id)
    positions = starts[:, tf.newaxis] + tf.range(spec.content, dtype=tf.int64)  # [K, content]
    last = tf.shape(dense, out_type=tf.int64)[1] - 1
    tokens = tf.gather(dense, tf.minimum(positions, last), axis=1)  # [batch, K, content]
    flat = tf.RaggedTensor.from_tensor(
        tf.reshape(tokens, [-1, spec.content]), lengths=tf.reshape(keep, [-1])
    )
    packed = pack_inputs(flat, max_seq_length=spec.max_seq_length, **special_ids)
    shape = [-1, k, spec.max_seq_length]
    covered = (count - 1) * spec.step + spec.content
    return {
        **{name: tf.reshape(t, shape) for name, t in packed.items()},
        WINDOW_MASK: tf.cast(real, tf.int32),
        WINDOWS: tf.cast(needed, tf.int32),
        DROPPED_TOKENS: tf.cast(tf.maximum(lengths - covered, 0), tf.int32),
    }


def tokenize_windows(tokenizer, texts, spec: WindowSpec, text_pairs=None, max_chunks=None) -> dict:
    """Tokenizes each text once and cuts it into windows; see `window_ids`.

    Args:
        tokenizer: the checkpoint's `InGraphTokenizer` (its ids and its single-text template).
        texts: a list or 1-D array of strings, or a 1-D string `tf.Tensor`.
        spec: the window length, overlap and cap.
        text_pairs: must be `None`: pairs are not windowed (see the module docstring).
        max_chunks: the K of the output; `spec.max_chunks` by default.
    """
    if text_pairs is not None:
        raise ConfigError(
            "--long-documents chunk windows one text per document; text pairs are not "
            "supported yet. Put both texts in one column, or use --long-documents truncate."
        )
    ids = tokenizer.tokenize(texts)
    if not isinstance(ids, tf.RaggedTensor):
        raise ConfigError("tokenize_windows takes a batch of texts; wrap a single text in a list.")
    return window_ids(ids, spec, max_chunks=max_chunks, **tokenizer.special_ids)
