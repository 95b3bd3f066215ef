"""Sliding-window (local) self-attention, part of the family kit: each query i attends to the
keys j with |i - j| <= `window` (ModernBERT's local layers), computed densely or only in the
band.

Densely, the window is a [seq, seq] bias on full attention (`window_bias`): all seq² scores are
computed, and all but ~(2 window + 1) per query are thrown away; at 8k tokens the bias alone is
256 MB. `banded_attention` computes the band alone: it cuts the sequence into blocks of
`window` tokens, and since a query of block b sees keys of blocks b - 1, b and b + 1 only, each
block's queries meet those 3 x window keys: seq x 3 window scores instead of seq², the same
numbers (a key outside the window gets the same -1e9 bias, whose softmax weight is 0 in float32
either way).

The block count must be known when the graph is traced (static shapes: XLA, JAX, TensorFlow's
per-shape traces); a length known only at run time (the exports' [None, None] inputs) is
computed densely. `uses_bands` decides, once per encoder call, from the static length: the band
pays from `BANDED_FROM_BLOCKS` blocks on (measured: BENCHMARKS.md, bench/local_attention.py).
"""

from __future__ import annotations

import math

import numpy as np
from keras import ops

from bertfit.model.layers import matmul_transposed

NEGATIVE = -1e9  # the additive bias of a key a query may not attend to, as the padding mask's

# Sequences of at least this many blocks of `window` tokens are computed in the band. Shorter,
# the attention's share of a layer's work is too small for the band's fewer scores to pay for
# cutting the sequence into blocks (and its gradient for gathering them back): at
# ModernBERT-base's window (64), a local layer's training step took 1.1x the dense time at 512
# tokens (8 blocks), 0.97x at 1k (16) and 0.53x at 2k, its forward pass 0.5x at 2k
# (bench/local_attention.py, BENCHMARKS.md).
BANDED_FROM_BLOCKS = 16


def window_bias(length, window: int):
    """The dense sliding window as an additive bias [seq, seq], float32: 0 where |i - j| <=
    `window`, NEGATIVE elsewhere.

    Examples:
    >>> ops.convert_to_numpy(window_bias(3, 1)).tolist()
    [[0.0, 0.0, -1000000000.0], [0.0, 0.0, 0.0], [-1000000000.0, 0.0, 0.0]]
    """
    positions = ops.cast(ops.arange(length, dtype="int32"), "float32")[:, None]
    distance = ops.abs(positions - ops.transpose(positions))
    return ops.where(
        distance <= float(window),
        ops.convert_to_tensor(0.0, "float32"),
        ops.convert_to_tensor(NEGATIVE, "float32"),
    )


def uses_bands(length, window: int) -> bool:
    """Whether a sequence of `length` tokens (a Python int when static, else unknown) is
    computed in the band: when static and at least `BANDED_FROM_BLOCKS` windows long.

    Examples:
    >>> uses_bands(8192, 64), uses_bands(512, 64), uses_bands(None, 64)
    (True, False, False)
    """
    return isinstance(length, int) and length >= BANDED_FROM_BLOCKS * max(window, 1)


def banded_attention(q, k, v, padding_bias, window: int, *, dropout=None, training=False):
    """softmax(q k^T / sqrt(head_size) + bias) v over the keys |i - j| <= `window` alone.

    Args:
        q, k, v: [batch, heads, seq, head_size], seq static (a Python int).
        padding_bias: [batch, 1, 1, seq] float32: 0 for a token, -1e9 for padding.
        window: the largest |i - j| attended.
        dropout: applied to the attention probabilities (in `v`'s dtype), or None.

    Returns:
        [batch, heads, seq, head_size] in `v`'s dtype; the logits and softmax run in float32.

    Examples:
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (ops.convert_to_tensor(rng.normal(size=(1, 2, 9, 4)), "float32")
    ...            for _ in range(3))
    >>> bias = ops.zeros((1, 1, 1, 9))
    >>> dense = ops.softmax(matmul_transposed(q, k) / 2 + window_bias(9, 2), axis=-1) @ v
    >>> bool(ops.all(ops.abs(banded_attention(q, k, v, bias, 2) - dense) < 1e-6))
    True
    """
    heads, length, head_size = q.shape[1], q.shape[2], q.shape[3]
    block = max(window, 1)
    blocks = -(-length // block)
    extra = blocks * block - length  # the last block's padding

    def in_blocks(x, fill=0.0):
        """[batch, heads, seq, d] -> [batch, heads, blocks, block, d]."""
        x = ops.pad(x, [[0, 0], [0, 0], [0, extra], [0, 0]], constant_values=fill)
        return ops.reshape(x, (-1, x.shape[1], blocks, block, x.shape[3]))

    def with_neighbours(x, fill=0.0):
        """[..., blocks, block, d] -> [..., blocks, 3 * block, d]: each block after its left
        neighbour and before its right one (`fill` beyond the ends)."""
        x = ops.pad(x, [[0, 0], [0, 0], [1, 1], [0, 0], [0, 0]], constant_values=fill)
        return ops.concatenate([x[:, :, :-2], x[:, :, 1:-1], x[:, :, 2:]], axis=3)

    keys = with_neighbours(in_blocks(k))
    values = with_neighbours(in_blocks(v))
    # The keys' padding, and the positions past either end, as [batch, 1, blocks, 1, 3 block].
    key_bias = ops.reshape(ops.cast(padding_bias, "float32"), (-1, 1, length, 1))
    key_bias = with_neighbours(in_blocks(key_bias, NEGATIVE), NEGATIVE)
    key_bias = ops.reshape(key_bias, (-1, 1, blocks, 1, 3 * block))
    scores = matmul_transposed(in_blocks(q), keys) * (1.0 / math.sqrt(head_size))
    logits = ops.cast(scores, "float32") + key_bias + _band(block, window)
    probs = ops.cast(ops.softmax(logits, axis=-1), v.dtype)
    if dropout is not None:
        probs = dropout(probs, training=training)
    attended = ops.reshape(ops.matmul(probs, values), (-1, heads, blocks * block, head_size))
    return attended[:, :, :length]


def _band(block: int, window: int) -> np.ndarray:
    """[block, 3 block] float32: 0 where the query at offset r of a block may see the key at
    offset c of the block and its two neighbours (|c - block - r| <= window), else NEGATIVE."""
    offsets = np.arange(3 * block)[None, :] - block - np.arange(block)[:, None]
    return np.where(np.abs(offsets) <= window, 0.0, NEGATIVE).astype(np.float32)
