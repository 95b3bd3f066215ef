"""Packing and long-document windows in NumPy, for the host tokenizer (`bertfit.text.host`):
the arrays `pack_inputs` and `windows.window_ids` make in the graph, made from lists of ids.

The rules are the graph's: `[CLS] a [SEP]` or `[CLS] a [SEP]... b [SEP]` with the checkpoint's
ids and pair template, Hugging Face's `longest_first` truncation of pairs, padding to
`max_seq_length` or to the longest row; windows of `max_seq_length - 2` ids, `stride` of them
shared, at most K a document, padding windows `[CLS] [SEP]`. The arithmetic both share lives in
`bertfit.text.lengths`; tests/text/test_host_tokenizer.py holds the two to the same arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertfit.errors import InputFormatError
from bertfit.text.lengths import (
    DROPPED_TOKENS,
    WINDOW_MASK,
    WINDOWS,
    WindowSpec,
    check_max_chunks,
    check_max_seq_length,
    check_padding,
    truncation_lengths,
)


def pack_ids(
    ids_a: Sequence[Sequence[int]],
    ids_b: Sequence[Sequence[int]] | None = None,
    *,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_id: int = 0,
    padding: str = "max_length",
    pair_separators: int = 1,
    second_type_id: int = 1,
) -> dict[str, np.ndarray]:
    """Packs `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` as `pack_inputs` does, in NumPy.

    Args:
        ids_a: ids of the first segments, one list a row.
        ids_b: ids of the second segments, one list a row, or `None`.
        max_seq_length: the packed length, special tokens included.
        cls_id, sep_id, pad_id, pair_separators, second_type_id: the tokenizer's
            `special_ids` (see `pack_inputs`).
        padding: `"max_length"` pads to `max_seq_length`; `"longest"` to the longest row.

    Returns:
        int32 `input_word_ids`, `input_mask`, `input_type_ids`, each `[batch, length]`.

    Examples:
    >>> inputs = pack_ids([[7, 8, 9]], [[5]], max_seq_length=6, cls_id=101, sep_id=102)
    >>> inputs["input_word_ids"].tolist(), inputs["input_type_ids"].tolist()
    ([[101, 7, 8, 102, 5, 102]], [[0, 0, 0, 0, 1, 1]])
    """
    check_padding(padding)
    check_max_seq_length(max_seq_length, 2 + pair_separators if ids_b is not None else 2)
    len_a = np.array([len(ids) for ids in ids_a], np.int64)
    if ids_b is None:
        keep_a, keep_b = np.minimum(len_a, max_seq_length - 2), np.zeros_like(len_a)
    else:
        if len(ids_b) != len(ids_a):
            raise InputFormatError(
                f"ids_a and ids_b must have one row per example each, got {len(ids_a)} and "
                f"{len(ids_b)} rows."
            )
        len_b = np.array([len(ids) for ids in ids_b], np.int64)
        keep_a, keep_b = truncation_lengths(len_a, len_b, max_seq_length - 2 - pair_separators)
    rows, seconds = [], []  # each row's ids, and where its second segment starts
    for i, ids in enumerate(ids_a):
        row = [cls_id, *ids[: keep_a[i]], sep_id]
        if ids_b is not None:
            row += [sep_id] * (pair_separators - 1)
        seconds.append(len(row))
        if ids_b is not None:
            row += [*ids_b[i][: keep_b[i]], sep_id]
        rows.append(row)
    width = max_seq_length if padding == "max_length" else max(map(len, rows), default=0)
    word_ids = np.full((len(rows), width), pad_id, np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    type_ids = np.zeros((len(rows), width), np.int32)
    for i, (row, second) in enumerate(zip(rows, seconds, strict=True)):
        word_ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
        type_ids[i, second : len(row)] = second_type_id
    return {"input_word_ids": word_ids, "input_mask": mask, "input_type_ids": type_ids}


def window_ids(
    ids: Sequence[Sequence[int]],
    spec: WindowSpec,
    *,
    max_chunks: int | None = None,
    **special_ids,
) -> dict[str, np.ndarray]:
    """Cuts token ids into packed windows as `bertfit.text.windows.window_ids` does, in NumPy.

    Args:
        ids: each document's ids (a tokenizer's `tokenize`).
        spec: the window length, overlap and cap.
        max_chunks: the K of the output (a chunk-count bucket); `spec.max_chunks` by default.
        **special_ids: the tokenizer's `special_ids`.

    Returns:
        int32 `input_word_ids`, `input_mask`, `input_type_ids` `[batch, K, max_seq_length]`,
        `window_mask` `[batch, K]`, and per document `windows` (needed, before the cut) and
        `dropped_tokens`.

    Examples:
    >>> spec = WindowSpec(max_seq_length=5, stride=1, max_chunks=3)
    >>> out = window_ids([[7, 8, 9, 10, 11]], spec, cls_id=1, sep_id=2)
    >>> out["input_word_ids"][0].tolist(), out["window_mask"].tolist()
    ([[1, 7, 8, 9, 2], [1, 9, 10, 11, 2], [1, 2, 0, 0, 0]], [[1, 1, 0]])
    """
    k = spec.max_chunks if max_chunks is None else max_chunks
    check_max_chunks(k)
    lengths = np.array([len(row) for row in ids], np.int64)
    needed = spec.windows_needed(lengths)
    count = np.minimum(needed, k)
    windows = []  # K a document: its first `count`, then empty ones ([CLS] [SEP])
    for row, n in zip(ids, count, strict=True):
        starts = range(0, n * spec.step, spec.step)
        windows += [row[start : start + spec.content] for start in starts] + [[]] * (k - n)
    packed = pack_ids(windows, max_seq_length=spec.max_seq_length, **special_ids)
    covered = (count - 1) * spec.step + spec.content
    return {
        **{name: a.reshape(len(ids), k, spec.max_seq_length) for name, a in packed.items()},
        WINDOW_MASK: (np.arange(k) < count[:, np.newaxis]).astype(np.int32),
        WINDOWS: needed.astype(np.int32),
        DROPPED_TOKENS: np.maximum(lengths - covered, 0).astype(np.int32),
    }


def pack_rows(
    examples: dict[str, np.ndarray], slots: int, length: int, pad_id: int = 0
) -> dict[str, np.ndarray]:
    """Several packed examples per row (`--packing`), as `bertfit.text.packing.pack_rows`
    lays them out in the graph, in NumPy.

    Args:
        examples: `pack_ids`' outputs for rows * `slots` examples, slot after slot of each
            row, [rows * slots, width]; an empty slot has an all-zero `input_mask`.
        slots: the example slots of a row.
        length: the row length; the examples of a row must fit in it.
        pad_id: written after a row's last example.

    Returns:
        int32 `input_word_ids`, `input_type_ids`, `input_mask` (each token's slot, 1..slots;
        0 on padding) and `input_positions` [rows, length], and `example_starts` [rows,
        slots] (each slot's first token; 0 for an empty slot).

    Examples:
    >>> examples = pack_ids([[7, 8], [9], []], max_seq_length=4, cls_id=101, sep_id=102)
    >>> examples["input_mask"][2] = 0  # the third slot is empty
    >>> rows = pack_rows(examples, slots=3, length=8)
    >>> rows["input_word_ids"].tolist(), rows["input_mask"].tolist()
    ([[101, 7, 8, 102, 101, 9, 102, 0]], [[1, 1, 1, 1, 2, 2, 2, 0]])
    >>> rows["input_positions"].tolist(), rows["example_starts"].tolist()
    ([[0, 1, 2, 3, 0, 1, 2, 0]], [[0, 4, 0]])
    """
    mask = np.asarray(examples["input_mask"])
    count, width = mask.shape
    rows = count // slots
    keep = (mask > 0).reshape(rows, slots * width)
    row, place = np.nonzero(keep)
    column = (np.cumsum(keep, axis=1) - 1)[row, place]  # each kept token's place in its row
    fits = column < length  # as the graph's: a row past `length` is cut
    row, place, column = row[fits], place[fits], column[fits]
    per_token = {
        "input_word_ids": (examples["input_word_ids"], pad_id),
        "input_type_ids": (examples["input_type_ids"], 0),
        "input_mask": ((np.arange(count) % slots + 1)[:, np.newaxis], 0),  # the slot, 1..slots
        "input_positions": (np.arange(width)[np.newaxis], 0),
    }
    packed = {}
    for name, (values, pad) in per_token.items():
        tokens = np.broadcast_to(values, (count, width)).reshape(rows, slots * width)
        packed[name] = np.full((rows, length), pad, np.int32)
        packed[name][row, column] = tokens[row, place]
    lengths = (mask > 0).sum(axis=1).reshape(rows, slots)
    starts = np.cumsum(lengths, axis=1) - lengths
    packed["example_starts"] = np.where(lengths > 0, starts, 0).astype(np.int32)
    return packed
