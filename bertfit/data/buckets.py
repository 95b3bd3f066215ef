"""Choosing the sequence-length buckets from the training data's length histogram.

Every bucket is one more static shape: a trace (and an XLA compile) of the train step and of the
predict step. Every token slot past an example's length is padding the step computes for
nothing. `choose_buckets` weighs the two with a small cost model, in token slots:

- a batch of B examples padded to length b costs B * (b + STEP_OVERHEAD_TOKENS): the matrix work
  grows with the length, and the clipping and optimizer update cost the same at every length;
- tracing and compiling one bucket (train and predict step) costs `trace_tokens`, the
  compiler's: TRACE_TOKENS for TensorFlow's XLA, JAX_TRACE_TOKENS for `jax.jit`.

Both were measured on a 2-core CPU with MiniLM-L6, where they decide the most:
- TensorFlow's XLA: one step at batch 32 grows by ~13 ms per token of length from ~95 ms, and
  tracing and compiling a bucket's train and predict steps takes ~12 s;
- JAX: one step grows by ~9.1 ms per token from ~27 ms (173 ms at 16 tokens, 610 at 64, 1,320
  at 128), and lowering and compiling a bucket's train step takes ~2.9 s, its predict step
  ~0.45 s.
On an accelerator the compute per token is cheaper, so the same constants choose no more
buckets than a CPU would.

When one trace serves every bucket (`trace_tokens` UNTRACED: a step without XLA, batches padded
to their longest row), a bucket costs only its last, part-empty batch: the buckets are then
chosen from a finer grid
(steps of max_seq_length / 32, from 8) and there may be more of them, which brings the padding
close to that of sorting every batch by length (RT at 64: 28.5 token slots per example, 30.9
on the grid of 8, 27.0 without padding).

    >>> import numpy as np
    >>> lengths = np.array([9] * 3000 + [20] * 3000 + [60] * 100)
    >>> choose_buckets(lengths, max_seq_length=64, batch_size=32, epochs=3)
    [16, 24, 64]
    >>> choose_buckets(lengths[:40], max_seq_length=64, batch_size=32, epochs=1)  # 64: unused
    [16, 64]
    >>> lengths = np.array([9] * 600 + [20] * 600 + [60] * 60)  # a fifth: compiling weighs more
    >>> choose_buckets(lengths, max_seq_length=64, batch_size=32, epochs=3)
    [24, 64]
    >>> choose_buckets(lengths, 64, batch_size=32, epochs=3, trace_tokens=JAX_TRACE_TOKENS)
    [16, 24, 64]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import numpy as np

from bertfit.config import AUTO_BUCKETS, NO_BUCKETS

STEP = 8  # bucket lengths are multiples of 8 (and max_seq_length): friendly to XLA's tiling
MIN_BUCKET = 16
MAX_BUCKETS = 8
# One trace for every bucket: lengths in steps of max_seq_length / UNTRACED_GRID from
# MIN_UNTRACED_BUCKET, at most MAX_UNTRACED_BUCKETS of them.
UNTRACED_GRID = 32
MIN_UNTRACED_BUCKET = 8
MAX_UNTRACED_BUCKETS = 16
STEP_OVERHEAD_TOKENS = 8
# A bucket's trace and compile in token slots of step time (see above): 12 s / (13 ms / 32) for
# TensorFlow's XLA, (2.9 + 0.45) s / (9.1 ms / 32) for jax.jit; none when one trace serves all.
TRACE_TOKENS = 30_000
JAX_TRACE_TOKENS = 12_000
UNTRACED = 0


def candidate_lengths(max_seq_length: int, step: int = STEP, first: int = MIN_BUCKET) -> list[int]:
    """Multiples of `step` from `first` up to, and always including, max_seq_length."""
    return sorted({*range(first, max_seq_length, step), max_seq_length})


def epoch_cost(counts: np.ndarray, lengths: list[int], batch_size: int) -> float:
    """Token slots one epoch computes when bucket i holds counts[i] examples padded to
    lengths[i], each bucket cut into full batches (the last one padded with empty rows)."""
    batches = np.ceil(counts / batch_size)
    return float(np.sum(batches * batch_size * (np.asarray(lengths) + STEP_OVERHEAD_TOKENS)))


def choose_buckets(
    packed_lengths: np.ndarray,
    max_seq_length: int,
    *,
    batch_size: int,
    epochs: float,
    trace_tokens: int = TRACE_TOKENS,
) -> list[int]:
    """The buckets that minimise `epochs` epochs of steps plus one trace of `trace_tokens`
    per bucket (UNTRACED: one trace serves every bucket, see above).

    Dynamic programming over the candidate lengths: best[k][j] is the cheapest way to cover
    every example up to candidate j with k buckets, the last of them ending at j.
    """
    candidates = candidate_lengths(max_seq_length)
    most = MAX_BUCKETS
    if trace_tokens == UNTRACED:
        step = max(1, max_seq_length // UNTRACED_GRID)
        candidates = candidate_lengths(max_seq_length, step, first=MIN_UNTRACED_BUCKET)
        most = MAX_UNTRACED_BUCKETS
    clipped = np.minimum(packed_lengths, max_seq_length)
    # examples[j]: how many examples are at most candidates[j] long
    examples = np.searchsorted(np.sort(clipped), candidates, side="right")

    def cost(start: int, end: int) -> float:
        """The bucket ending at candidates[end], holding the lengths after candidates[start]:
        its steps, and its trace if any example uses it."""
        count = examples[end] - (examples[start] if start >= 0 else 0)
        steps = epochs * epoch_cost(np.array([count]), [candidates[end]], batch_size)
        return steps + (trace_tokens if count else 0)

    n = len(candidates)
    best = [[math.inf] * n for _ in range(most + 1)]
    came_from = [[-1] * n for _ in range(most + 1)]
    for j in range(n):
        best[1][j] = cost(-1, j)
    for k in range(2, most + 1):
        for j in range(n):
            for i in range(j):
                total = best[k - 1][i] + cost(i, j)
                if total < best[k][j]:
                    best[k][j], came_from[k][j] = total, i
    last = n - 1
    k = min(range(1, most + 1), key=lambda k: best[k][last])
    chosen = []
    while last >= 0 and k >= 1:
        chosen.append(candidates[last])
        last, k = came_from[k][last], k - 1
    return sorted(chosen)


def padding_share(packed_lengths: np.ndarray, buckets: list[int]) -> float:
    """The share of token slots that are padding when each example is padded to its bucket."""
    clipped = np.minimum(packed_lengths, buckets[-1])
    padded = np.asarray(buckets)[np.searchsorted(buckets, clipped)]
    return float(1 - clipped.sum() / max(padded.sum(), 1))


def bucket_lengths(lengths: Iterable[int], max_seq_length: int) -> tuple[int, ...]:
    """Bucket lengths as everything that pads to them takes them: sorted, each once, and
    max_seq_length among them (the longest packed input always has a bucket).

    >>> bucket_lengths([64, 32, 64], 128)
    (32, 64, 128)
    """
    return tuple(sorted(set(lengths) | {max_seq_length}))


def default_buckets(max_seq_length: int) -> tuple[int, ...]:
    """max/4, max/2 and max, keeping those of at least 16: 128 → (32, 64, 128)."""
    candidates = [max_seq_length // 4, max_seq_length // 2]
    return bucket_lengths((b for b in candidates if b >= 16), max_seq_length)


def fixed_buckets(setting: str | list[int], max_seq_length: int) -> tuple[int, ...] | None:
    """The buckets a `--buckets` setting names without looking at data: "none" →
    (max_seq_length,), a list → itself with max_seq_length; None for "auto".

    >>> fixed_buckets([64, 32], 128), fixed_buckets("none", 128), fixed_buckets("auto", 128)
    ((32, 64, 128), (128,), None)
    """
    if setting == AUTO_BUCKETS:
        return None
    if setting == NO_BUCKETS:
        return (max_seq_length,)
    return bucket_lengths(setting, max_seq_length)


def saved_buckets(setting: str | list[int], max_seq_length: int) -> tuple[int, ...]:
    """The buckets of a saved run (or an export made from one): what it resolved; a config
    that never trained ("auto") gets `default_buckets`."""
    return fixed_buckets(setting, max_seq_length) or default_buckets(max_seq_length)


@dataclasses.dataclass(frozen=True)
class ResolvedBuckets:
    """The length buckets a run uses, decided once (`resolve_buckets`), and a note for the
    user when they were chosen from the data."""

    lengths: tuple[int, ...]
    note: str | None = None


def resolve_buckets(
    setting: str | list[int],
    max_seq_length: int,
    packed_lengths: np.ndarray,
    *,
    batch_size: int,
    epochs: float,
    trace_tokens: int,
    saved: tuple[int, ...] | None = None,
) -> ResolvedBuckets:
    """The run's buckets: those `setting` names, else (`"auto"`) those a resumed run chose
    (`saved`), else chosen from the training lengths for `epochs` epochs of `batch_size`
    (`trace_tokens`: what a bucket's trace costs the step's compiler, UNTRACED without XLA)."""
    fixed = fixed_buckets(setting, max_seq_length) or saved
    if fixed is not None:
        return ResolvedBuckets(tuple(fixed))
    chosen = tuple(
        choose_buckets(
            packed_lengths,
            max_seq_length,
            batch_size=batch_size,
            epochs=epochs,
            trace_tokens=trace_tokens,
        )
    )
    default = default_buckets(max_seq_length)
    return ResolvedBuckets(
        chosen,
        f"length buckets {', '.join(map(str, chosen))} chosen from the training lengths: "
        f"{padding_share(packed_lengths, chosen):.0%} of token slots are padding "
        f"({padding_share(packed_lengths, default):.0%} with {', '.join(map(str, default))}); "
        "--buckets sets them",
    )
