"""Shape, dtype and input checks on what a compiled step would be fed.

They run on an element spec (static facts: is every dimension known? which dtypes?) and on a few
real batches (values: padding side, [CLS], id ranges, mask values, ragged last batch). Both
bertfit's own pipeline and a user's `tf.data.Dataset` go through the same checks.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from bertfit.checks.findings import ERROR, INFO, WARNING, Report
from bertfit.config import per_replica_batch
from bertfit.errors import ConfigError
from bertfit.model.inputs import (
    ALIASES,
    GLOBAL_EXAMPLES,
    INDEX,
    INPUT_NAMES,
    LABEL,
    MASK,
    PACKED_NAMES,
    STARTS,
    TYPE_IDS,
    WEIGHT,
    WORD_IDS,
)
from bertfit.text.windows import WINDOW_MASK

# Batch keys that are not model inputs: bertfit's own, then the usual names in other libraries.
LABEL_KEYS = (LABEL, "labels", "y", "target")
WEIGHT_KEYS = (WEIGHT, "sample_weight", "weight")
EXTRA_KEYS = (INDEX, GLOBAL_EXAMPLES)  # bertfit's own bookkeeping
TPU_BATCH_MULTIPLE = 8


@dataclasses.dataclass
class BatchExpectations:
    """What the checks need to know about the consumer of the batches."""

    target: str = "cpu"
    replicas: int = 1
    vocab_size: int | None = None
    type_vocab_size: int | None = None
    cls_id: int | None = None
    encoder_takes_text: bool = False
    source: str = "dataset"
    global_batch: bool = True  # the batch dimension is the global batch (else per replica)
    batch_setting: str = "a global batch of"  # what sets it: how a fix names it


def split_element(element):
    """(features, labels, weights) from a dict element or a (features, labels[, weights]) tuple."""
    if isinstance(element, tuple | list):
        features = element[0]
        labels = element[1] if len(element) > 1 else None
        weights = element[2] if len(element) > 2 else None
        return features, labels, weights
    if isinstance(element, Mapping):
        features = {
            k: v for k, v in element.items() if k not in LABEL_KEYS + WEIGHT_KEYS + EXTRA_KEYS
        }
        labels = next((element[k] for k in LABEL_KEYS if k in element), None)
        weights = next((element[k] for k in WEIGHT_KEYS if k in element), None)
        return features, labels, weights
    return element, None, None


def _named(features) -> dict:
    return dict(features) if isinstance(features, Mapping) else {"<features>": features}


def canonical(features) -> dict:
    """Features renamed to bertfit's input names (unknown names kept as they are)."""
    return {ALIASES.get(k, k): v for k, v in _named(features).items()}


# ---- static: the element spec ----


def check_spec(report: Report, spec, ctx: BatchExpectations) -> None:
    features, labels, weights = split_element(spec)
    named = _named(features)
    _check_keys(report, named, ctx)
    leading = {}
    for name, s in named.items():
        if not isinstance(s, tf.TensorSpec):
            kind = type(s).__name__
            report.add(
                "shape-dynamic-seq",
                ERROR,
                f"input {name!r} is a {kind}, not a dense tensor",
                where=f"{ctx.source}: {name}",
                why="ragged or sparse inputs have data-dependent shapes that XLA cannot compile",
                fix="pad to a fixed length in the pipeline (e.g. .to_tensor(shape=[None, "
                "L]) then batch with drop_remainder=True)",
            )
            continue
        _check_dtype(report, name, s.dtype, ctx)
        shape = s.shape
        if shape.rank is None:
            report.add(
                "shape-dynamic-seq",
                ERROR,
                f"input {name!r} has an unknown rank",
                where=f"{ctx.source}: {name}",
                why=_STATIC_WHY[ctx.target],
                fix="give it a fixed shape [batch, seq] with tf.ensure_shape",
            )
            continue
        if shape.rank >= 1:
            leading[name] = shape[0]
        if shape.rank >= 2 and any(d is None for d in shape[1:]):
            report.add(
                "shape-dynamic-seq",
                ERROR if ctx.target == "tpu" else WARNING,
                f"input {name!r} has shape {shape_text(shape)}: its sequence dimension is "
                "not static (per-batch padding, e.g. padded_batch or pad-to-longest)",
                where=f"{ctx.source}: {name}",
                why=_STATIC_WHY[ctx.target],
                fix="pad every example to a fixed length (bertfit's --buckets pad to a "
                "few fixed lengths), or pass padded_shapes with fixed sizes to "
                "padded_batch",
            )
    if isinstance(labels, tf.TensorSpec):
        if labels.dtype.is_floating:
            report.add(
                "dtype-float-labels",
                ERROR,
                f"labels are {labels.dtype.name}; a classifier needs integer class ids",
                where=f"{ctx.source}: label",
                why="sparse categorical cross-entropy indexes the logits by label; "
                "float labels fail or are silently truncated",
                fix="map labels to int32 class ids 0..K-1 (dataset.map(lambda x, y: "
                "(x, tf.cast(y, tf.int32)))) or let bertfit's label map do it",
            )
        if labels.shape.rank:
            leading["label"] = labels.shape[0]
    if isinstance(weights, tf.TensorSpec) and weights.shape.rank:
        leading["weight"] = weights.shape[0]
    _judge_batch_dimension(report, leading, ctx)
    static = {n: d for n, d in leading.items() if d is not None}
    if len(set(static.values())) > 1:
        report.add(
            "shape-batch-mismatch",
            ERROR,
            "the inputs disagree on the batch size: "
            + ", ".join(f"{n} {d}" for n, d in static.items()),
            where=ctx.source,
            why="every tensor of a step must hold the same examples",
            fix="look for a reshape or a batch() applied to some of the inputs only",
        )
    batch = next(iter(static.values()), None)
    if batch is not None:
        check_batch_size(report, batch, ctx)


def _check_keys(report: Report, named: dict, ctx: BatchExpectations) -> None:
    if ctx.encoder_takes_text:
        return  # a model taking strings names its own inputs (or takes one unnamed tensor)
    # window_mask: the ChunkedClassifier's input next to the windows (--long-documents chunk);
    # input_positions and example_starts: a packed batch's (--packing)
    unknown = [k for k in named if k not in ALIASES and k not in (WINDOW_MASK, *PACKED_NAMES)]
    for key in unknown:
        close = difflib.get_close_matches(key, list(ALIASES), n=1, cutoff=0.5)
        target = ALIASES[close[0]] if close else None
        mapping = "; ".join(f"{k} → {ALIASES.get(k, '?')}" for k in named)
        report.add(
            "input-key-names",
            ERROR,
            f"input key {key!r} is not a name the encoder "
            "knows" + (f" (did you mean {target!r}?)" if target else ""),
            where=f"{ctx.source}: {key}",
            why="the encoder looks its inputs up by name; an unknown name is refused "
            "(or, in other libraries, silently ignored)",
            fix=f"rename the keys to {', '.join(INPUT_NAMES)} (Hugging Face and "
            f"KerasHub names are accepted too). Mapping seen: {mapping}",
        )
    present = {ALIASES[k] for k in named if k in ALIASES}
    if not unknown and named and WORD_IDS not in present and "<features>" not in named:
        report.add(
            "input-missing",
            ERROR,
            f"no {WORD_IDS!r} among the inputs {sorted(named)}",
            where=ctx.source,
            fix=f"pass {', '.join(INPUT_NAMES)}",
        )
    if present and MASK not in present and "<features>" not in named:
        report.add(
            "input-missing",
            ERROR,
            f"no {MASK!r} among the inputs {sorted(named)}",
            where=ctx.source,
            why="without a mask the encoder attends to padding",
            fix="pass input_mask (1 on real tokens, 0 on padding)",
        )


def _check_dtype(report: Report, name: str, dtype: tf.DType, ctx: BatchExpectations) -> None:
    if dtype == tf.string:
        if not ctx.encoder_takes_text:
            report.add(
                "input-raw-strings",
                ERROR,
                f"input {name!r} holds raw strings but the encoder takes token ids",
                where=f"{ctx.source}: {name}",
                why="an id encoder cannot read text, and XLA cannot compile string ops",
                fix="tokenize first: encoder, tokenizer = bertfit.load_encoder(path); "
                "dataset.map(lambda t, y: (tokenizer(t, max_seq_length=128), y))",
            )
        return
    if ctx.encoder_takes_text and dtype.is_integer:
        report.add(
            "input-ids-to-text-encoder",
            ERROR,
            f"input {name!r} holds token ids but the model takes raw text (it tokenizes in-graph)",
            where=f"{ctx.source}: {name}",
            why="ids would be read as text, or refused by the model's signature",
            fix="give this model the strings themselves, or use the bare encoder "
            "(bertfit.load_encoder) for ids",
        )
        return
    if dtype == tf.int64 and ctx.target == "tpu":
        report.add(
            "dtype-int64-on-tpu",
            ERROR,
            f"input {name!r} is int64",
            where=f"{ctx.source}: {name}",
            why="TPUs support int32 ids; int64 inputs are refused or emulated slowly, "
            "and the infeed doubles its traffic",
            fix="cast ids, mask and type ids to int32 in the input pipeline",
        )
    if dtype.is_floating and name in ALIASES:
        report.add(
            "dtype-float-ids",
            ERROR,
            f"input {name!r} is {dtype.name}; ids and masks must be integers",
            where=f"{ctx.source}: {name}",
            fix="cast to int32 in the input pipeline",
        )


def _judge_batch_dimension(report: Report, leading: dict, ctx: BatchExpectations) -> None:
    """The batch dimension is one for the whole element: `ds.batch(B, drop_remainder=True)
    .map(tokenizer)` leaves the labels at [B] while shape inference loses B in the tokenizer's
    outputs ([None, L]); every element still has B rows, so that is not a dynamic batch."""
    unknown = [name for name, size in leading.items() if size is None]
    if not unknown:
        return
    known = {name: size for name, size in leading.items() if size is not None}
    if not known:
        _dynamic_batch(report, unknown[0], ctx)
        return
    name, size = next(iter(known.items()))
    report.add(
        "shape-batch-from-other-component",
        INFO,
        f"{', '.join(repr(n) for n in unknown)} have an unknown batch dimension in the "
        f"element spec, but {name!r} has {size}: a map after batch(..., drop_remainder=True) "
        "hides the size from shape inference; every batch still has the same size",
        where=ctx.source,
        fix=f"optional: tf.ensure_shape(x, [{size}, ...]) in the map states it",
    )


def _dynamic_batch(report: Report, name: str, ctx: BatchExpectations) -> None:
    if "shape-dynamic-batch" in report.codes:
        return
    report.add(
        "shape-dynamic-batch",
        ERROR if ctx.target == "tpu" else WARNING,
        f"input {name!r} has an unknown batch dimension: the last batch can be "
        "smaller than the others (a ragged last batch)",
        where=f"{ctx.source}: {name}",
        why=_STATIC_WHY[ctx.target],
        fix="batch with drop_remainder=True, or pad the last batch to the full size "
        "with zero example weights (bertfit's pipeline does, and counts them)",
    )


_STATIC_WHY = {
    "tpu": "a TPU compiles one program per input shape and needs every dimension known; a "
    "dynamic dimension fails compilation or recompiles for each new shape",
    "gpu": "under XLA every new shape triggers a recompilation (seconds to minutes each)",
    "cpu": "under XLA every new shape triggers a recompilation",
}


def check_batch_size(report: Report, batch: int, ctx: BatchExpectations) -> None:
    """Global batch over replicas, and the per-replica batch a TPU wants (reported once)."""
    if {"shape-batch-not-divisible", "shape-tpu-batch-multiple"} & set(report.codes):
        return
    replicas = ctx.replicas
    per_replica = batch
    if ctx.global_batch:
        try:
            per_replica = per_replica_batch(batch, replicas, ctx.batch_setting)
        except ConfigError as e:
            report.add(
                "shape-batch-not-divisible",
                ERROR,
                str(e),
                where=ctx.source,
                why="every replica must get the same number of examples",
            )
            return
    if ctx.target == "tpu" and per_replica % TPU_BATCH_MULTIPLE:
        report.add(
            "shape-tpu-batch-multiple",
            WARNING,
            f"the per-replica batch is {per_replica}, not a multiple of {TPU_BATCH_MULTIPLE}",
            where=ctx.source,
            why="TPU matrix units work on tiles of 8 (and 128) rows; other sizes are "
            "padded, wasting the difference",
            fix=f"use a global batch of {TPU_BATCH_MULTIPLE * replicas}×k, e.g. "
            f"{TPU_BATCH_MULTIPLE * replicas * max(1, round(per_replica / 8))}",
        )


# ---- values: real batches ----


@dataclasses.dataclass
class BatchStats:
    """Counts over the sampled batches, turned into findings once at the end."""

    batches: int = 0
    rows: int = 0
    leading_sizes: set = dataclasses.field(default_factory=set)
    seq_sizes: set = dataclasses.field(default_factory=set)
    shapes: list = dataclasses.field(default_factory=list)
    left_padded: int = 0
    no_cls: int = 0
    first_tokens: set = dataclasses.field(default_factory=set)
    bad_ids: int = 0
    max_id: int = -1
    bad_types: int = 0
    max_type: int = -1
    bad_mask: set = dataclasses.field(default_factory=set)
    zero_weight_batches: int = 0


def observe_batch(stats: BatchStats, element, ctx: BatchExpectations) -> None:
    features, _, weights = split_element(element)
    named = canonical(features)
    ids, mask, types = (named.get(n) for n in (WORD_IDS, MASK, TYPE_IDS))
    stats.batches += 1
    if ids is None or not hasattr(ids, "shape") or getattr(ids, "dtype", None) == tf.string:
        return
    ids = np.asarray(ids)
    windows = named.get(WINDOW_MASK)
    if not (ids.ndim == 2 or (ids.ndim == 3 and windows is not None)):
        return
    stats.rows += ids.shape[0]
    stats.leading_sizes.add(ids.shape[0])
    stats.seq_sizes.add(ids.shape[-1])
    if tuple(ids.shape) not in stats.shapes:
        stats.shapes.append(tuple(ids.shape))
    real = np.ones(ids.shape[0], bool)
    if weights is not None:
        real = np.asarray(weights) > 0
        stats.zero_weight_batches += int(not real.any())
    if ids.ndim == 3:  # documents' windows [batch, K, seq]: check every real window as a row
        real = (np.asarray(windows) > 0) & real[:, None]
        ids, real = ids.reshape(-1, ids.shape[-1]), real.reshape(-1)
        mask = None if mask is None else np.asarray(mask).reshape(ids.shape)
        types = None if types is None else np.asarray(types).reshape(ids.shape)
    # each example's first token: a packed row's examples start at its example_starts
    firsts, real_firsts, mask_values = ids[:, 0], real, {0, 1}
    if STARTS in named:
        starts = np.asarray(named[STARTS])
        firsts = np.take_along_axis(ids, starts, axis=1).reshape(-1)
        real_firsts = real.reshape(-1) if real.ndim == 2 else np.repeat(real, starts.shape[1])
        real = real.any(axis=1) if real.ndim == 2 else real
        mask_values = set(range(starts.shape[1] + 1))  # each token's example in its row
    if mask is not None:
        mask = np.asarray(mask)
        stats.bad_mask |= set(np.unique(mask).tolist()) - mask_values
        binary = mask != 0
        starts_padded = ~binary[:, 0] & binary.any(axis=1)
        stats.left_padded += int((starts_padded & real).sum())
    if ctx.cls_id is not None:
        stats.no_cls += int(((firsts != ctx.cls_id) & real_firsts).sum())
    else:
        stats.first_tokens |= set(firsts[real_firsts].tolist())
    if ctx.vocab_size is not None:
        stats.bad_ids += int((ids >= ctx.vocab_size).sum() + (ids < 0).sum())
        stats.max_id = max(stats.max_id, int(ids.max(initial=0)))
    if types is not None and ctx.type_vocab_size is not None:
        types = np.asarray(types)
        stats.bad_types += int((types >= ctx.type_vocab_size).sum() + (types < 0).sum())
        stats.max_type = max(stats.max_type, int(types.max(initial=0)))


def report_batches(report: Report, stats: BatchStats, ctx: BatchExpectations) -> None:
    where = f"{ctx.source}: {stats.batches} batch(es) sampled"
    if len(stats.leading_sizes) > 1:
        report.add(
            "shape-dynamic-batch",
            ERROR if ctx.target == "tpu" else WARNING,
            f"batches of {len(stats.leading_sizes)} different sizes "
            f"{sorted(stats.leading_sizes)} (a ragged last batch)",
            where=where,
            why=_STATIC_WHY[ctx.target],
            fix="batch with drop_remainder=True, or pad the last batch with zero-weight "
            "rows (bertfit's pipeline does)",
        )
    if stats.left_padded:
        report.add(
            "shape-left-padding",
            ERROR,
            f"{stats.left_padded} row(s) start with padding "
            "(input_mask 0...0 1...1): the text is padded on the left",
            where=where,
            why="BERT's position embeddings and [CLS] pooling expect the text at "
            "position 0 and padding on the right; left padding shifts every position",
            fix="pad on the right (tokenizer padding_side='right'; bertfit always does)",
        )
    if stats.no_cls or (ctx.cls_id is None and len(stats.first_tokens) > 1):
        count = stats.no_cls or "some"
        report.add(
            "input-no-cls",
            ERROR if ctx.cls_id is not None else WARNING,
            f"{count} row(s) do not start with [CLS]"
            + (
                f" (id {ctx.cls_id})"
                if ctx.cls_id is not None
                else f" (first ids vary: {sorted(stats.first_tokens)[:5]})"
            ),
            where=f"{where}, input_word_ids[:, 0]",
            why="the pooler and CLS pooling read position 0, and the encoder was "
            "pre-trained with [CLS] a [SEP] (b [SEP])",
            fix="pack with special tokens (bertfit's tokenizer(...) does; HF: "
            "add_special_tokens=True)",
        )
    if stats.bad_ids:
        report.add(
            "input-id-out-of-vocab",
            ERROR,
            f"{stats.bad_ids} token id(s) outside the "
            f"vocabulary (largest {stats.max_id}, vocab size {ctx.vocab_size})",
            where=f"{where}, input_word_ids",
            why="on CPU the embedding lookup fails; on GPU and TPU it silently returns "
            "zeros or garbage",
            fix="tokenize with the vocab.txt that belongs to this checkpoint",
        )
    if stats.bad_types:
        report.add(
            "input-type-id-range",
            ERROR,
            f"{stats.bad_types} type id(s) ≥ the type "
            f"vocab size {ctx.type_vocab_size} (largest {stats.max_type})",
            where=f"{where}, input_type_ids",
            why="the segment embedding has only type_vocab_size rows",
            fix="use 0 for the first segment and 1 for the second (RoBERTa-style models "
            "take only 0)",
        )
    if stats.bad_mask:
        report.add(
            "input-mask-values",
            ERROR,
            f"input_mask holds values {sorted(stats.bad_mask)[:5]} besides 0 and 1",
            where=f"{where}, input_mask",
            why="the mask becomes an additive attention bias; other values scale it",
            fix="use 1 for real tokens and 0 for padding (not token ids, not -inf)",
        )
    if stats.zero_weight_batches == stats.batches and stats.batches:
        report.add(
            "data-all-weights-zero",
            ERROR,
            "every sampled batch has only zero example weights",
            where=where,
            why="the loss and every gradient are zero",
            fix="check the example_weight column",
        )


def shape_text(shape) -> str:
    dims = shape.as_list() if isinstance(shape, tf.TensorShape) else list(shape)
    return "[" + ", ".join("None" if d is None else str(d) for d in dims) + "]"
