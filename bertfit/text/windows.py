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

import tensorflow as tf

from bertfit.errors import ConfigError
from bertfit.text.lengths import (
    DROPPED_TOKENS,
    WINDOW_MASK,
    WINDOWS,
    WindowSpec,
    check_max_chunks,
)
from bertfit.text.packing import pack_inputs


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
    check_max_chunks(k)
    ids = tf.cast(ids, tf.int32)
    lengths = ids.row_lengths()  # int64
    needed = spec.windows_needed(lengths, xp=tf)
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
