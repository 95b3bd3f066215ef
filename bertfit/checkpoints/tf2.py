"""TF2 checkpoints of a Model Garden BERT encoder, as `tf.train.Checkpoint` writes them."""

from __future__ import annotations

import re
from pathlib import Path

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.names import tf2_checkpoint_table
from bertfit.checkpoints.tf1 import (
    casing_in,
    count_layers,
    find_checkpoint_prefix,
    find_config_file,
    infer_config,
    is_optimizer_slot,
    list_checkpoint,
    read_checkpoint_tensors,
    read_config,
    vocab_in,
)
from bertfit.errors import CheckpointError

VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
# Where the word embeddings sit below the encoder object, for each way of writing the encoder.
WORD_EMBEDDINGS = ("_embedding_layer/embeddings", "layer_with_weights-0/embeddings")


def is_object_based(names) -> bool:
    return any(name.endswith(VALUE) for name in names)


def encoder_prefix(names, where: Path) -> str:
    """The object path of the encoder: "encoder/", "model/encoder/", "" ...

    A classifier checkpoint holds the encoder one level down; the shortest match wins.
    """
    plain = sorted((n.removesuffix(VALUE) for n in names if n.endswith(VALUE)), key=len)
    for suffix in WORD_EMBEDDINGS:
        for name in plain:
            prefix = name.removesuffix(suffix)
            if name.endswith(suffix) and (
                suffix.startswith("_") or f"{prefix}layer_with_weights-3/gamma" in plain
            ):
                return prefix
    raise CheckpointError(
        f"{where}: a TF2 object-based checkpoint, but no object in it looks like a BERT encoder "
        f"(nothing ends in {' or '.join(WORD_EMBEDDINGS)}). bertfit reads checkpoints of Model "
        "Garden's BertEncoder; save the encoder with tf.train.Checkpoint(encoder=encoder)."
    )


def read_tf2(path: Path) -> Checkpoint:
    """Reads a TF2 object-based checkpoint of a Model Garden `BertEncoder`."""
    prefix = find_checkpoint_prefix(path)
    if prefix is None:
        raise CheckpointError(f"{path}: no TF checkpoint (*.index) found.")
    shapes = list_checkpoint(prefix)
    encoder = encoder_prefix(shapes, prefix)
    shapes = {
        n[len(encoder) :].removesuffix(VALUE): s
        for n, s in shapes.items()
        if n.startswith(encoder) and n.endswith(VALUE) and not is_optimizer_slot(n)
    }
    num_layers = max(
        count_layers(shapes, r"^_transformer_layers/(\d+)/"),
        count_layers(shapes, r"^layer_with_weights-(\d+)/_attention_layer/") - 4,
    )
    if num_layers <= 0:
        raise CheckpointError(f"{prefix}: the encoder in this checkpoint has no layers.")
    query = next(s for n, s in shapes.items() if re.search(r"/_query_dense/kernel$", n))
    folder = prefix.parent
    config_file = find_config_file(folder, folder.parent)
    if config_file is not None:
        config = read_config(config_file)
    else:
        table = tf2_checkpoint_table(num_layers, query[1])
        config, _ = infer_config(shapes, table, num_layers, query[1], prefix)
    tensors = read_checkpoint_tensors(
        prefix, lambda n: n.startswith(encoder) and n.endswith(VALUE) and not is_optimizer_slot(n)
    )
    tensors = {n[len(encoder) :].removesuffix(VALUE): v for n, v in tensors.items()}
    return Checkpoint(
        format="tf2-checkpoint",
        path=prefix,
        config=config,
        tensors=tensors,
        table=tf2_checkpoint_table(config.num_hidden_layers, config.num_attention_heads),
        vocab_file=vocab_in(folder),
        lower_case=casing_in(folder, folder.parent),
    )
