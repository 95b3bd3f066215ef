"""TF2 checkpoints of a Model Garden encoder, as `tf.train.Checkpoint` writes them: a
`BertEncoder` (BERT; ELECTRA when it has an `embedding_projection`) or an `AlbertEncoder`.

The family comes from a config file beside the checkpoint when one says (`albert_config.json`,
a `model_type`), else from what is stored: an embedding projection and a single stored
transformer layer in a functional encoder is an `AlbertEncoder` (whose layer count only a config
says: it is guessed from the width, with a note), a projection and more layers an ELECTRA.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.names import tf2_checkpoint_table
from bertfit.checkpoints.tf1 import (
    CONFIG_ASSUMED,
    albert_layers_guess,
    as_family,
    casing_in,
    config_family,
    count_layers,
    find_checkpoint_prefix,
    find_config_file,
    infer_config,
    is_optimizer_slot,
    list_checkpoint,
    read_checkpoint_tensors,
    read_config,
    sentencepiece_dir,
    vocab_in,
)
from bertfit.errors import CheckpointError, CheckpointWarning

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
    # A functional encoder's `layer_with_weights-4` is the embedding projection when it has one.
    projection = "_embedding_projection/kernel" in shapes or "layer_with_weights-4/kernel" in shapes
    subclassed = count_layers(shapes, r"^_transformer_layers/(\d+)/")
    stored = max(
        subclassed,
        count_layers(shapes, r"^layer_with_weights-(\d+)/_attention_layer/") - 4 - projection,
    )
    if stored <= 0:
        raise CheckpointError(f"{prefix}: the encoder in this checkpoint has no layers.")
    query = next(s for n, s in shapes.items() if re.search(r"/_query_dense/kernel$", n))
    folder = prefix.parent
    config_file = find_config_file(folder, folder.parent)
    family = config_family(config_file)
    if family is None:
        family = "BERT" if not projection else "ELECTRA"
        if projection and stored == 1 and not subclassed:
            family = "ALBERT"  # AlbertEncoder: functional, one stored layer
    shared = family == "ALBERT"
    notes: list[str] = []
    if config_file is not None:
        config = read_config(config_file)
    else:
        table = tf2_checkpoint_table(stored, query[1], projection=projection, shared=shared)
        config, notes = infer_config(shapes, table, stored, query[1], prefix)
        if shared:
            layers, note = albert_layers_guess(config.hidden_size)
            config = dataclasses.replace(config, num_hidden_layers=layers)
            notes.append(note)
    pooler = f"layer_with_weights-{4 + projection + stored}/kernel"
    has_pooler = "_pooler_layer/kernel" in shapes or pooler in shapes
    word = next(s for n, s in shapes.items() if n.endswith(WORD_EMBEDDINGS))
    config = as_family(config, family, word[1], has_pooler)
    for note in notes:
        warnings.warn(CheckpointWarning(f"{prefix}: {note}", code=CONFIG_ASSUMED), stacklevel=2)
    tensors = read_checkpoint_tensors(
        prefix, lambda n: n.startswith(encoder) and n.endswith(VALUE) and not is_optimizer_slot(n)
    )
    tensors = {n[len(encoder) :].removesuffix(VALUE): v for n, v in tensors.items()}
    return Checkpoint(
        format="tf2-checkpoint",
        path=prefix,
        config=config,
        tensors=tensors,
        table=tf2_checkpoint_table(
            config.num_hidden_layers,
            config.num_attention_heads,
            projection=config.embedding_size is not None,
            shared=config.share_layers,
        ),
        vocab_file=vocab_in(folder),
        lower_case=casing_in(folder, folder.parent),
        tokenizer_dir=sentencepiece_dir(folder) if vocab_in(folder) is None else None,
        family=family,
        notes=notes,
    )
