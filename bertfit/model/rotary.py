"""Rotary position embeddings (Su et al., 2021), a part of the family kit (`model/blocks.py`):
each query and key is turned by its position, so attention sees relative positions.

The layout is Hugging Face's "rotate half" (`rotate_half` in transformers' Llama, GPT-NeoX,
ModernBERT, GTE, NomicBERT): the first `rotary_dim` dimensions of a head's vector are split in
two halves (x1, x2), and each pair (x1[k], x2[k]) is rotated by position * inverse_frequency[k],
inverse_frequency[k] = theta ** (-2k / rotary_dim); the other dimensions (partial rotary:
`rotary_dim` < head size, GPT-NeoX's `rotary_pct`, NomicBERT's `rotary_emb_fraction`) pass
unchanged. The frequencies are computed once in NumPy float32, as transformers computes them,
the angles once per encoder call for its sequence length, and the rotations in float32 under a
mixed dtype policy.

Examples:
>>> inverse = inverse_frequencies(4, theta=10_000.0)
>>> inverse.tolist()
[1.0, 0.009999999776482582]
>>> turns = angles(3, inverse)
>>> tuple(turns.cos.shape)
(3, 2)
>>> x = ops.ones([1, 1, 3, 6])  # [batch, heads, seq, head_size], the last 2 dims not rotated
>>> tuple(rotate(x, turns).shape)
(1, 1, 3, 6)
"""

from __future__ import annotations

import dataclasses

import numpy as np
from keras import ops


def inverse_frequencies(rotary_dim: int, theta: float, ntk_factor: float = 1.0) -> np.ndarray:
    """The `rotary_dim / 2` inverse frequencies theta ** (-2k / rotary_dim), float32.

    `ntk_factor` > 1: fixed NTK-aware scaling (bloc97's; GTE's `rope_scaling` of type "ntk",
    https://kexue.fm/archives/9706): the base becomes theta * factor and every frequency is
    divided by factor ** (2 / rotary_dim), for all sequence lengths.
    """
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even, got {rotary_dim}.")
    exponents = np.arange(0, rotary_dim, 2, dtype=np.float32) / np.float32(rotary_dim)
    base = np.float32(theta * ntk_factor)
    inverse = np.float32(1.0) / base**exponents
    if ntk_factor != 1.0:
        inverse = inverse / np.float32(ntk_factor ** (2 / rotary_dim))
    return inverse.astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Angles:
    """The cosines and sines of one call's rotary angles, each [seq, rotary_dim / 2] (a packed
    batch's: [batch, 1, seq, rotary_dim / 2]) in float32: an object, not tensors, so that Keras
    does not cast them to the compute dtype on their way into a layer under a mixed policy."""

    cos: object  # a tensor
    sin: object

    def first(self) -> Angles:
        """The first position's alone (a layer computing the first token only)."""
        return Angles(self.cos[..., :1, :], self.sin[..., :1, :])


def angles(length, inverse: np.ndarray, positions=None) -> Angles:
    """The angles of positions 0..length-1 times `inverse` (`length` a Python int or a scalar
    tensor), [seq, rotary_dim / 2]; or of a packed batch's `positions` (each token's within its
    example, int [batch, seq]: `model.inputs.POSITIONS`), [batch, 1, seq, rotary_dim / 2], one
    per token of each row, for every head."""
    if positions is None:
        places = ops.cast(ops.arange(length, dtype="int32"), "float32")[:, None]
    else:
        places = ops.expand_dims(ops.cast(positions, "float32"), (1, 3))
    turned = places * ops.convert_to_tensor(inverse, "float32")
    return Angles(ops.cos(turned), ops.sin(turned))


def rotate(x, turns: Angles):
    """`x` [batch, heads, seq, head_size] with its first rotary_dim dimensions rotated by
    `turns` ("rotate half": (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)) and the rest as
    they are; computed in float32, returned in `x`'s dtype."""
    cos, sin = turns.cos, turns.sin
    rotary_dim = 2 * cos.shape[-1]
    values = ops.cast(x, "float32")
    passed = None
    if rotary_dim < x.shape[-1]:
        values, passed = values[..., :rotary_dim], values[..., rotary_dim:]
    x1, x2 = ops.split(values, 2, axis=-1)
    parts = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    rotated = ops.concatenate(parts if passed is None else [*parts, passed], axis=-1)
    return ops.cast(rotated, x.dtype)
