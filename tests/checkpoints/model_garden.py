"""Writers of Model Garden-style artifacts with TensorFlow alone (no tf-models install).

`official.nlp.tools.export_tfhub` saves a Keras encoder whose variables carry Model Garden's
names (`word_embeddings/embeddings`, `transformer/layer_0/self_attention/query/kernel`, ...;
under `bert_encoder_v2/` when the encoder was built from an `EncoderConfig` of type `bert_v2`),
computes the tanh-approximated GELU (`official.modeling.activations.gelu`), returns
`pooled_output`, `default`, `sequence_output` and `encoder_outputs`, and puts a non-trainable
`do_lower_case` variable and a `vocab_file` asset on the root object. It writes no config file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import tensorflow as tf

from bertfit.checkpoints.hub_export import HubBertEncoder
from bertfit.model.config import BertConfig
from bertfit.model.encoder import BertEncoder
from tests.tiny import TINY_CONFIG, TINY_VOCAB, tiny_encoder, write_vocab

SPECS = {
    name: tf.TensorSpec([None, None], tf.int32)
    for name in ("input_word_ids", "input_mask", "input_type_ids")
}


def write_model_garden_encoder(
    path: Path,
    config: BertConfig = TINY_CONFIG,
    *,
    lower_case: bool = True,
    scope: str = "",
    vocab=TINY_VOCAB,
    vocab_name: str = "wordpieces.txt",
    activation: str = "gelu_new",
    keras_activation: str | None = None,
) -> BertEncoder:
    """An encoder SavedModel as `export_tfhub` lays it out; returns the source `BertEncoder`.

    `scope` builds the variables in a name scope ("bert_encoder_v2/" for `bert_v2`);
    `keras_activation` writes a `keras_metadata.pb` recording it as tf_keras does.
    """
    encoder = tiny_encoder(dataclasses.replace(config, hidden_act=activation))
    weights = {k: v.numpy() for k, v in encoder.named_variables().items()}
    with tf.name_scope(scope.rstrip("/")) if scope else contextlib.nullcontext():
        module = HubBertEncoder(encoder.config, weights)
    staging = path.parent / f"{path.name}_staging"
    staging.mkdir(parents=True, exist_ok=True)
    vocab_file = write_vocab(staging, vocab).rename(staging / vocab_name)
    module.vocab_file = tf.saved_model.Asset(str(vocab_file))
    module.do_lower_case = tf.Variable(lower_case, trainable=False)
    module.variables = [*module.variables, module.do_lower_case]  # Keras lists it too
    for training in (False, True):
        module.__call__.get_concrete_function(SPECS, training=training)
    tf.saved_model.save(module, str(path))
    if keras_activation is not None:
        _write_keras_metadata(path, keras_activation)
    return encoder


def _write_keras_metadata(path: Path, inner_activation: str) -> None:
    """Layer configs as tf_keras's `keras_metadata.pb` holds them (JSON strings in a proto):
    the transformer layers' `inner_activation`, and Dense layers' own `activation` (the pooler's
    tanh), which is not the encoder's."""
    layers = [
        {"class_name": "Dense", "config": {"name": "pooler_transform", "activation": "tanh"}},
        {
            "class_name": "TransformerEncoderBlock",
            "config": {"name": "transformer/layer_0", "inner_activation": inner_activation},
        },
    ]
    (path / "keras_metadata.pb").write_bytes(
        b"".join(b"\x12" + json.dumps(x).encode() for x in layers)
    )
