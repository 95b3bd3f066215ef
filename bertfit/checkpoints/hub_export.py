"""TF Hub-style BERT SavedModels: a reusable encoder and its matching preprocessing model.

The encoder SavedModel follows TF Hub's reusable SavedModel interface: `__call__(inputs,
training)` takes a dict of int32 `input_word_ids`, `input_mask`, `input_type_ids` and returns
`pooled_output`, `default` (the same tensor, as TF Hub's text embeddings name it),
`sequence_output` and `encoder_outputs`; `variables`, `trainable_variables` and
`regularization_losses` are attributes, so `hub.KerasLayer(path, trainable=True)` fine-tunes it.
The computation is written in plain TensorFlow ops on variables named as in Model Garden's
`BertEncoder`, so the SavedModel needs neither Keras nor bertfit to load.

The preprocessing SavedModel maps strings to the three inputs with bertfit's in-graph tokenizer;
loading it needs `import tensorflow_text`, like TF Hub's own BERT preprocessors. Its serving
signature takes `sentences`, and `bert_pack_inputs` trims pairs round-robin, as TF Hub's do.

bertfit reads its own encoder SavedModel back by what it stores: `assets/bert_config.json` is
`BertConfig.to_dict()` (it names its `model_type`, so its `hidden_act` keeps Hugging Face's
meaning: an HF source's exact GELU stays exact), unlike Model Garden's exports, which store no
config and use the tanh-approximated GELU.

Examples:
>>> encoder, tokenizer = bertfit.load_encoder("minilm-l6")  # doctest: +SKIP
>>> write_hub_encoder(encoder, "out/encoder", vocab_file=..., lower_case=True)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.checkpoints.names import tf2_variable_table
from bertfit.model.blocks import activation
from bertfit.model.config import BertConfig
from bertfit.model.inputs import INPUT_NAMES
from bertfit.model.tracking import hold_keras_model
from bertfit.text.preprocessor import BertPreprocessor


def _input_specs():
    return {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}


class HubBertEncoder(tf.Module):
    """A BERT encoder in plain TF ops over named `tf.Variable`s (what the SavedModel holds).

    Args:
        config: the architecture.
        weights: canonical bertfit name → array in the encoder's layout
            (`{k: v.numpy() for k, v in encoder.named_variables().items()}`).
    """

    # Plain attributes in the SavedModel, as TF Hub's reusable interface asks.
    variables = None
    trainable_variables = None

    def __init__(self, config: BertConfig, weights: dict[str, np.ndarray]):
        super().__init__(name="bert_encoder")
        self.config_json = json.dumps(config.to_dict())
        self._config = config
        table = tf2_variable_table(config.num_hidden_layers, config.num_attention_heads)
        self._by_canonical = {
            canonical: tf.Variable(
                source.from_encoder(np.asarray(weights[canonical], np.float32)),
                name=source.names[0],
                trainable=True,
            )
            for canonical, source in table.items()
        }
        self.variables = list(self._by_canonical.values())
        self.trainable_variables = list(self._by_canonical.values())
        self.regularization_losses = []

    def _v(self, name: str) -> tf.Variable:
        return self._by_canonical[name]

    def _layer_norm(self, x, prefix: str):
        # The same arithmetic as Keras's LayerNormalization, so outputs agree to rounding.
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        scale = tf.math.rsqrt(variance + self._config.layer_norm_eps) * self._v(f"{prefix}/gamma")
        return x * scale + (self._v(f"{prefix}/beta") - mean * scale)

    def _dropout(self, x, rate: float, training: bool):
        return tf.nn.dropout(x, rate=rate) if training and rate > 0 else x

    def forward(self, inputs, training: bool = False):
        config = self._config
        ids = tf.cast(inputs["input_word_ids"], tf.int32)
        mask = tf.cast(inputs["input_mask"], tf.float32)
        types = tf.cast(inputs["input_type_ids"], tf.int32)
        seq = tf.shape(ids)[1]
        x = (
            tf.gather(self._v("embeddings/word_embeddings"), ids)
            + self._v("embeddings/position_embeddings")[tf.newaxis, :seq]
            + tf.gather(self._v("embeddings/token_type_embeddings"), types)
        )
        x = self._dropout(
            self._layer_norm(x, "embeddings/layer_norm"), config.hidden_dropout_prob, training
        )
        bias = (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * -1e9
        scale = 1.0 / math.sqrt(config.head_size)
        act = activation(config.hidden_act)  # traced into plain TF ops, like the rest
        encoder_outputs = []
        for i in range(config.num_hidden_layers):
            p = f"layer_{i}"
            # Kernels are stored as Model Garden's EinsumDense: [hidden, heads, head_size].
            q, k, v = (
                tf.einsum("bsh,hnd->bsnd", x, self._v(f"{p}/attention/{n}/kernel"))
                + self._v(f"{p}/attention/{n}/bias")
                for n in ("query", "key", "value")
            )
            scores = tf.einsum("bqnd,bknd->bnqk", q, k) * scale + bias
            probs = self._dropout(
                tf.nn.softmax(scores, axis=-1), config.attention_probs_dropout_prob, training
            )
            context = tf.einsum("bnqk,bknd->bqnd", probs, v)
            attended = tf.einsum(
                "bqnd,ndh->bqh", context, self._v(f"{p}/attention/output/kernel")
            ) + self._v(f"{p}/attention/output/bias")
            x = self._layer_norm(
                x + self._dropout(attended, config.hidden_dropout_prob, training),
                f"{p}/attention/layer_norm",
            )
            inner = act(
                tf.einsum("bsh,hi->bsi", x, self._v(f"{p}/intermediate/kernel"))
                + self._v(f"{p}/intermediate/bias")
            )
            out = tf.einsum("bsi,ih->bsh", inner, self._v(f"{p}/output/kernel")) + self._v(
                f"{p}/output/bias"
            )
            x = self._layer_norm(
                x + self._dropout(out, config.hidden_dropout_prob, training),
                f"{p}/output/layer_norm",
            )
            encoder_outputs.append(x)
        pooled = tf.tanh(tf.matmul(x[:, 0, :], self._v("pooler/kernel")) + self._v("pooler/bias"))
        return {
            "pooled_output": pooled,
            "default": pooled,  # TF Hub's alias for the whole-input representation
            "sequence_output": x,
            "encoder_outputs": encoder_outputs,
        }

    @tf.function
    def __call__(self, inputs, training=False):
        return self.forward(inputs, training)


class HubKerasEncoder(tf.Module):
    """An encoder of any family as TF Hub's reusable SavedModel: bertfit's Keras encoder, its
    variables exposed as TF Hub asks. For families other than BERT, whose layers Model
    Garden's names do not describe (the SavedModel needs `import tensorflow` only, no Keras
    code, to load and run).

    Args:
        encoder: a `BertEncoder`.
    """

    variables = None
    trainable_variables = None

    def __init__(self, encoder):
        super().__init__(name="bert_encoder")
        hold_keras_model(self, "encoder", encoder)  # every loader runs it (model/tracking.py)
        self.config_json = json.dumps(encoder.config.to_dict())
        self.variables = [v.value for v in encoder.weights]
        self.trainable_variables = [v.value for v in encoder.trainable_weights]
        self.regularization_losses = []

    def forward(self, inputs, training: bool = False):
        outputs = dict(self.encoder(inputs, training=training))
        first = outputs.get("pooled_output", outputs["sequence_output"][:, 0])
        return {**outputs, "default": first}  # TF Hub's whole-input representation

    @tf.function
    def __call__(self, inputs, training=False):
        return self.forward(inputs, training)


def write_hub_encoder(
    encoder, path: str | Path, vocab_file: Path | None = None, lower_case: bool | None = None
) -> Path:
    """Writes `encoder` (a `BertEncoder`) as a reusable TF Hub-style SavedModel at `path`.

    A BERT is written in plain TF ops over Model Garden's variable names (`HubBertEncoder`);
    another family as its Keras encoder (`HubKerasEncoder`). The vocabulary and casing go to
    `assets/` (`vocab.txt`, `tokenizer_config.json`) with the architecture
    (`assets/bert_config.json`), so bertfit reloads a BERT unchanged.
    """
    path = Path(path)
    if encoder.config.model_type == "bert":
        weights = {k: np.asarray(v.numpy()) for k, v in encoder.named_variables().items()}
        module = HubBertEncoder(encoder.config, weights)
    else:
        module = HubKerasEncoder(encoder)
    specs = _input_specs()
    for training in (False, True):
        module.__call__.get_concrete_function(specs, training=training)

    @tf.function(input_signature=list(specs.values()))
    def serve(input_word_ids, input_mask, input_type_ids):
        out = module.forward(
            {
                "input_word_ids": input_word_ids,
                "input_mask": input_mask,
                "input_type_ids": input_type_ids,
            },
            training=False,
        )
        return {
            key: out[key] for key in ("pooled_output", "default", "sequence_output") if key in out
        }

    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    _write_assets(path / "assets", encoder.config, vocab_file, lower_case)
    return path


def _write_assets(assets: Path, config: BertConfig, vocab_file, lower_case) -> None:
    assets.mkdir(parents=True, exist_ok=True)
    (assets / "bert_config.json").write_text(json.dumps(config.to_dict(), indent=2))
    if vocab_file is not None:
        shutil.copyfile(vocab_file, assets / "vocab.txt")
    if lower_case is not None:
        (assets / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lower_case}))


class _Preprocessor(tf.Module):
    """TF Hub's BERT preprocessor contract as a SavedModel: `BertPreprocessor`'s default call
    on strings ([batch] or a scalar), `tokenize` ([batch] → RaggedTensor [batch, words,
    wordpieces]) and `bert_pack_inputs(segments, seq_length)`, as traced functions."""

    def __init__(self, tokenizer, seq_length: int):
        super().__init__(name="bert_preprocessor")
        self.preprocessor = BertPreprocessor(tokenizer, seq_length)

    @tf.function
    def __call__(self, texts):
        return self.preprocessor(texts)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, texts):
        return self.preprocessor.tokenize(texts)

    @tf.function
    def bert_pack_inputs(self, segments, seq_length):
        return self.preprocessor.bert_pack_inputs(segments, seq_length)

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)]
    )
    def pair(self, texts, text_pairs):
        return self.preprocessor((texts, text_pairs))

    def trace(self) -> None:
        """Traces the concrete functions the SavedModel keeps."""
        self.__call__.get_concrete_function(tf.TensorSpec([None], tf.string))
        self.__call__.get_concrete_function(tf.TensorSpec([], tf.string))
        segment = tf.RaggedTensorSpec(
            [None, None, None], tf.int32, ragged_rank=2, row_splits_dtype=tf.int64
        )
        for count in (1, 2):
            self.bert_pack_inputs.get_concrete_function(
                [segment] * count, tf.TensorSpec([], tf.int32, name="seq_length")
            )


def write_hub_preprocessor(tokenizer, path: str | Path, seq_length: int = 128) -> Path:
    """Writes a preprocessing SavedModel with TF Hub's interface: strings → `input_word_ids`,
    `input_mask`, `input_type_ids` (int32, [batch, seq_length]), the serving signature's input
    named `sentences`; `tokenize`; `bert_pack_inputs` (pairs trimmed round-robin, as TF Hub's);
    and bertfit's `pair(texts, text_pairs)`, which packs two segments as bertfit's training
    does (Hugging Face's longest-first)."""
    path = Path(path)
    module = _Preprocessor(tokenizer, seq_length)
    module.trace()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def serve(sentences):  # TF Hub's preprocessors name their input `sentences`
        return module(sentences)

    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    return path
