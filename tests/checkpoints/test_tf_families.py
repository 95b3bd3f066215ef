"""ALBERT and ELECTRA from TensorFlow's formats load into the native encoder.

TF Hub's ALBERT and ELECTRA are Model Garden exports (`official.nlp.tools.export_tfhub`): an
`AlbertEncoder` (embeddings of width E, an `embedding_projection` to the hidden size, ONE
transformer layer `transformer/...` applied num_layers times) or a `BertEncoder` with an
`embedding_width` (ELECTRA: the same names as BERT plus `embedding_projection`). The writers
below lay the SavedModels, TF2 checkpoints and Google's TF1 ALBERT checkpoints out as those tools
do (variable names and shapes checked against a real Model Garden export), with TensorFlow
alone; each SavedModel is compared with `tf.saved_model.load` of itself.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.inspect import inspect_checkpoint
from bertfit.checkpoints.load import load_encoder, read_checkpoint
from bertfit.checkpoints.names import (
    identify,
    tf1_albert_table,
    tf2_checkpoint_table,
    tf2_family,
    tf2_variable_table,
)
from bertfit.checkpoints.weights import read_weights
from bertfit.model.classifier import BertClassifier
from bertfit.model.config import BertConfig
from bertfit.model.encoder import BertEncoder
from tests.tiny import TINY_VOCAB, _nested, tiny_encoder, tiny_inputs, write_vocab

ATOL = 1e-5

ALBERT = BertConfig(
    model_type="albert",
    vocab_size=len(TINY_VOCAB),
    embedding_size=16,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    hidden_act="gelu_new",  # Model Garden's and Google's GELU: the tanh approximation
    share_layers=True,
)
ELECTRA = dataclasses.replace(
    ALBERT, model_type="electra", num_hidden_layers=2, share_layers=False, has_pooler=True
)
SPECS = {
    name: tf.TensorSpec([None, None], tf.int32)
    for name in ("input_word_ids", "input_mask", "input_type_ids")
}


def _gelu_tanh(x):
    """`official.modeling.activations.gelu`: the tanh approximation, written out."""
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))


class _ModelGardenExport(tf.Module):
    """What `export_tfhub` saves, in plain TF ops: variables under Model Garden's names, a
    `__call__(inputs, training)` returning `pooled_output` (when there is a pooler), `default`,
    `sequence_output` and `encoder_outputs` (one per layer: an AlbertEncoder's shared layer
    appears once per application), and `do_lower_case` and `vocab_file` / `sp_model_file` on
    the root."""

    variables = None
    trainable_variables = None

    def __init__(self, config: BertConfig, stored: dict[str, np.ndarray]):
        super().__init__(name="model")
        self._config = config
        self._v = {name: tf.Variable(value, name=name) for name, value in stored.items()}
        self.variables = list(self._v.values())
        self.trainable_variables = list(self._v.values())
        self.regularization_losses = []
        self._shared = config.share_layers

    def _norm(self, x, prefix):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        gamma, beta = self._v[f"{prefix}/gamma"], self._v[f"{prefix}/beta"]
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta

    @tf.function
    def __call__(self, inputs, training=False):
        v, config = self._v, self._config
        ids, mask, types = (inputs[k] for k in ("input_word_ids", "input_mask", "input_type_ids"))
        seq = tf.shape(ids)[1]
        x = (
            tf.gather(v["word_embeddings/embeddings"], ids)
            + v["position_embedding/embeddings"][tf.newaxis, :seq]
            + tf.gather(v["type_embeddings/embeddings"], types)
        )
        x = self._norm(x, "embeddings/layer_norm")
        x = tf.einsum("bsx,xy->bsy", x, v["embedding_projection/kernel"])
        x += v["embedding_projection/bias"]
        bias = (1.0 - tf.cast(mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]) * -10000.0
        outputs = []
        for i in range(config.num_hidden_layers):
            p = "transformer" if self._shared else f"transformer/layer_{i}"
            q, k, val = (
                tf.einsum("bsh,hnd->bsnd", x, v[f"{p}/self_attention/{n}/kernel"])
                + v[f"{p}/self_attention/{n}/bias"]
                for n in ("query", "key", "value")
            )
            scores = tf.einsum("bqnd,bknd->bnqk", q, k) / math.sqrt(config.head_size) + bias
            context = tf.einsum("bnqk,bknd->bqnd", tf.nn.softmax(scores, -1), val)
            attended = tf.einsum(
                "bqnd,ndh->bqh", context, v[f"{p}/self_attention/attention_output/kernel"]
            )
            attended += v[f"{p}/self_attention/attention_output/bias"]
            x = self._norm(x + attended, f"{p}/self_attention_layer_norm")
            inner = _gelu_tanh(
                tf.einsum("bsh,hi->bsi", x, v[f"{p}/intermediate/kernel"])
                + v[f"{p}/intermediate/bias"]
            )
            out = tf.einsum("bsi,ih->bsh", inner, v[f"{p}/output/kernel"]) + v[f"{p}/output/bias"]
            x = self._norm(x + out, f"{p}/output_layer_norm")
            outputs.append(x)
        result = {"sequence_output": x, "encoder_outputs": outputs}
        if "pooler_transform/kernel" in v:
            pooled = tf.tanh(x[:, 0] @ v["pooler_transform/kernel"] + v["pooler_transform/bias"])
            result |= {"pooled_output": pooled, "default": pooled}
        return result


def _source(config: BertConfig, seed: int = 0) -> BertEncoder:
    return tiny_encoder(config, seed=seed)


def write_model_garden_export(path, config: BertConfig, sp_model=None, seed: int = 0):
    """A Model Garden `export_tfhub` SavedModel of an ALBERT or ELECTRA; returns the source."""
    source = _source(config, seed)
    table = tf2_variable_table(
        config.num_hidden_layers,
        config.num_attention_heads,
        projection=True,
        shared=config.share_layers,
    )
    module = _ModelGardenExport(config, read_weights(source, table))
    staging = path.parent / f"{path.name}_staging"
    staging.mkdir(parents=True, exist_ok=True)
    if sp_model is None:
        module.vocab_file = tf.saved_model.Asset(str(write_vocab(staging)))
        module.do_lower_case = tf.Variable(True, trainable=False)
        module.variables = [*module.variables, module.do_lower_case]
    else:  # ALBERT's: a SentencePiece model, named as Google's (not spiece.model)
        target = staging / "30k-clean.model"
        target.write_bytes(sp_model.read_bytes())
        module.sp_model_file = tf.saved_model.Asset(str(target))
    for training in (False, True):
        module.__call__.get_concrete_function(SPECS, training=training)
    tf.saved_model.save(module, str(path))
    return source


def _loaded(path):
    loaded = tf.saved_model.load(str(path))
    return lambda inputs: loaded(inputs, training=False)


def _max_diff(got, want, keys=("sequence_output", "pooled_output")) -> dict[str, float]:
    return {k: float(np.max(np.abs(np.asarray(got[k]) - np.asarray(want[k])))) for k in keys}


# ---- names ----


def test_the_family_comes_from_model_gardens_names():
    albert = tf2_variable_table(3, 4, projection=True, shared=True)
    names = {source.names[0] for source in albert.values()}
    assert "transformer/self_attention/query/kernel" in names  # no layer index
    assert "embedding_projection/kernel" in names
    assert not any("layer_1" in n for n in names)
    assert identify(names) == "tf2-variables"
    assert tf2_family(names) == "ALBERT"
    electra = {s.names[0] for s in tf2_variable_table(2, 4, projection=True).values()}
    assert tf2_family(electra) == "ELECTRA"
    assert tf2_family({s.names[0] for s in tf2_variable_table(2, 4).values()}) == "BERT"


def test_functional_checkpoint_numbering_shifts_past_the_projection():
    table = tf2_checkpoint_table(2, 4, projection=True)
    assert table["embeddings/projection/kernel"].names == (
        "_embedding_projection/kernel",
        "layer_with_weights-4/kernel",
    )
    assert (
        table["layer_0/intermediate/kernel"].names[1]
        == "layer_with_weights-5/_intermediate_dense/kernel"
    )
    assert table["pooler/kernel"].names[1] == "layer_with_weights-7/kernel"
    albert = tf2_checkpoint_table(12, 4, projection=True, shared=True)
    assert albert["pooler/kernel"].names[1] == "layer_with_weights-6/kernel"
    assert "layer_1/output/kernel" not in albert


# ---- TF Hub / Model Garden SavedModels ----


@pytest.mark.parametrize(("config", "family"), [(ALBERT, "ALBERT"), (ELECTRA, "ELECTRA")])
def test_a_model_garden_export_loads_natively_and_matches_itself(tmp_path, config, family):
    path = tmp_path / "encoder"
    write_model_garden_export(path, config)
    encoder, _ = load_encoder(path)
    assert isinstance(encoder, BertEncoder)
    assert read_checkpoint(path).family == family
    got = encoder.config
    assert (got.model_type, got.embedding_size, got.hidden_size) == (config.model_type, 16, 32)
    assert got.num_hidden_layers == config.num_hidden_layers  # ALBERT: from encoder_outputs
    assert got.share_layers is config.share_layers
    assert got.hidden_act == "gelu_new" and got.has_pooler
    assert len(encoder.load_report.loaded) == len(encoder.named_variables())
    assert not encoder.load_report.unexpected
    inputs = tiny_inputs()
    diffs = _max_diff(encoder(inputs), _loaded(path)(inputs))
    assert max(diffs.values()) < ATOL, diffs


def test_an_electra_export_without_a_pooler_has_none(tmp_path):
    path = tmp_path / "encoder"
    source = _source(dataclasses.replace(ELECTRA, has_pooler=False))
    table = tf2_variable_table(2, 4, projection=True)
    stored = read_weights(source, {k: v for k, v in table.items() if "pooler" not in k})
    module = _ModelGardenExport(ELECTRA, stored)
    module.__call__.get_concrete_function(SPECS, training=False)
    tf.saved_model.save(module, str(path))
    write_vocab(path / "assets")
    encoder, _ = load_encoder(path)
    assert not encoder.config.has_pooler
    inputs = tiny_inputs()
    got = encoder(inputs)
    assert "pooled_output" not in got
    diffs = _max_diff(got, _loaded(path)(inputs), keys=("sequence_output",))
    assert diffs["sequence_output"] < ATOL, diffs


@pytest.mark.parametrize(("config", "family"), [(ALBERT, "ALBERT"), (ELECTRA, "ELECTRA")])
def test_inspect_names_the_family_and_says_fine_tunable(tmp_path, config, family):
    write_model_garden_export(tmp_path / "encoder", config)
    report = inspect_checkpoint(tmp_path / "encoder")
    assert report["family"] == family
    assert report["fine_tunable"] is True
    assert report["loads_into"] == "native BertEncoder"
    assert report["architecture"]["layers"] == config.num_hidden_layers
    assert report["architecture"]["activation"] == "gelu_new"


@pytest.mark.parametrize("config", [ALBERT, ELECTRA], ids=["albert", "electra"])
def test_a_classifier_on_the_export_gets_gradients(tmp_path, config):
    write_model_garden_export(tmp_path / "encoder", config)
    model = BertClassifier.from_checkpoint(str(tmp_path / "encoder"), num_classes=2)
    inputs = tiny_inputs()
    with tf.GradientTape() as tape:
        logits = model(inputs, training=True)
        loss = tf.reduce_mean(
            keras.losses.sparse_categorical_crossentropy(
                tf.constant([0, 1, 0]), logits, from_logits=True
            )
        )
    variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    missing = [v.path for v, g in zip(variables, grads, strict=True) if g is None]
    assert not missing
    encoder = model.encoder
    shared = encoder.named_variables()["layer_0/intermediate/kernel"]
    grad = dict(zip([id(v) for v in variables], grads, strict=True))[id(shared)]
    assert float(tf.reduce_max(tf.abs(grad))) > 0


def test_albert_sp_model_file_is_its_tokenizer(tmp_path, monkeypatch):
    sentencepiece = pytest.importorskip("sentencepiece")
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(TINY_VOCAB[5:40]) for _ in range(20)), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "m"), vocab_size=40, model_type="unigram",
        num_threads=1, minloglevel=2, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], hard_vocab_limit=False,
    )  # fmt: skip
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    config = dataclasses.replace(ALBERT, vocab_size=pieces.get_piece_size())
    write_model_garden_export(tmp_path / "encoder", config, sp_model=tmp_path / "m.model")
    report = inspect_checkpoint(tmp_path / "encoder")
    assert report["tokenizer"] == "sentencepiece"
    assert report["fine_tunable"] is True
    encoder, tokenizer = load_encoder(tmp_path / "encoder")
    ids = tokenizer.tokenize(["The FILM"]).to_list()[0]
    assert ids == pieces.encode("the film")  # ALBERT lowercases


# ---- TF2 checkpoints (tf.train.Checkpoint of the encoder) ----


def _write_tf2(path, config, *, functional: bool, with_config: bool):
    source = _source(config)
    table = tf2_checkpoint_table(
        config.num_hidden_layers,
        config.num_attention_heads,
        projection=True,
        shared=config.share_layers,
    )
    column = 1 if functional else 0
    stored = {
        source_names.names[column]: source_names.from_encoder(value.numpy())
        for canonical, value in source.named_variables().items()
        for source_names in [table[canonical]]
    }
    tf.train.Checkpoint(encoder=_nested(stored)).write(str(path / "ckpt"))
    write_vocab(path)
    if with_config:  # Google's albert_config.json: "gelu" is the tanh approximation
        values = {
            k: getattr(config, k)
            for k in (
                "vocab_size embedding_size hidden_size num_hidden_layers num_attention_heads "
                "intermediate_size max_position_embeddings type_vocab_size"
            ).split()
        }
        name = "albert_config.json" if config.share_layers else "bert_config.json"
        (path / name).write_text(
            json.dumps({**values, "hidden_act": "gelu", "num_hidden_groups": 1} if
                       config.share_layers else {**values, "hidden_act": "gelu"})
        )  # fmt: skip
    return source


@pytest.mark.parametrize(
    ("config", "functional", "with_config"),
    [(ALBERT, True, True), (ELECTRA, True, False), (ELECTRA, False, False)],
    ids=["albert-functional", "electra-functional", "electra-subclassed"],
)
def test_a_tf2_checkpoint_loads_natively(tmp_path, config, functional, with_config):
    source = _write_tf2(tmp_path, config, functional=functional, with_config=with_config)
    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.family == config.model_type.upper()
    encoder, _ = load_encoder(tmp_path)
    assert encoder.config.num_hidden_layers == config.num_hidden_layers
    assert encoder.config.hidden_act == "gelu_new"
    assert len(encoder.load_report.loaded) == len(encoder.named_variables())
    inputs = tiny_inputs()
    diffs = _max_diff(encoder(inputs), source(inputs))
    assert max(diffs.values()) < ATOL, diffs


def test_a_tf2_albert_checkpoint_without_a_config_says_it_guessed_the_layers(tmp_path):
    _write_tf2(tmp_path, ALBERT, functional=True, with_config=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.family == "ALBERT"
    assert checkpoint.config.num_hidden_layers == 12
    assert any("albert_config.json" in note for note in checkpoint.notes)
    assert any("number of layers" in str(w.message) for w in caught)


# ---- Google's original TF1 ALBERT (google-research/albert) ----


def write_tf1_albert(path, config: BertConfig = ALBERT, with_config: bool = True):
    """`tf.compat.v1.train.Saver` over ALBERT's `bert/...` variables, as Google released them
    (with `cls/` heads and the step counter), and its `albert_config.json`."""
    source = _source(config)
    weights = read_weights(source, tf1_albert_table())
    with tf.Graph().as_default():
        for name, value in weights.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
        tf.compat.v1.get_variable("cls/predictions/output_bias", initializer=tf.zeros([3]))
        tf.compat.v1.get_variable(
            "cls/seq_relationship/output_weights", initializer=tf.zeros([2, 32])
        )
        tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(path / "model.ckpt-best"), write_meta_graph=False)
    if with_config:
        (path / "albert_config.json").write_text(
            json.dumps(
                {
                    "vocab_size": config.vocab_size,
                    "embedding_size": config.embedding_size,
                    "hidden_size": config.hidden_size,
                    "num_hidden_layers": config.num_hidden_layers,
                    "num_attention_heads": config.num_attention_heads,
                    "intermediate_size": config.intermediate_size,
                    "hidden_act": "gelu",
                    "max_position_embeddings": config.max_position_embeddings,
                    "type_vocab_size": 2,
                    "num_hidden_groups": 1,
                    "inner_group_num": 1,
                }
            )
        )
    write_vocab(path)
    return source


def test_a_google_tf1_albert_checkpoint_loads_natively(tmp_path):
    source = write_tf1_albert(tmp_path)
    checkpoint = read_checkpoint(tmp_path)
    assert checkpoint.family == "ALBERT"
    encoder, _ = load_encoder(tmp_path)
    config = encoder.config
    assert (config.model_type, config.share_layers, config.embedding_size) == ("albert", True, 16)
    assert config.num_hidden_layers == 3 and config.hidden_act == "gelu_new"
    assert not encoder.load_report.unexpected
    inputs = tiny_inputs()
    diffs = _max_diff(encoder(inputs), source(inputs))
    assert max(diffs.values()) < ATOL, diffs
    report = inspect_checkpoint(tmp_path)
    assert report["family"] == "ALBERT" and report["fine_tunable"] is True


def test_a_tf1_albert_with_several_layer_groups_is_refused(tmp_path):
    from bertfit.errors import CheckpointError

    write_tf1_albert(tmp_path)
    values = json.loads((tmp_path / "albert_config.json").read_text())
    (tmp_path / "albert_config.json").write_text(json.dumps({**values, "num_hidden_groups": 2}))
    with pytest.raises(CheckpointError, match="num_hidden_groups=2"):
        read_checkpoint(tmp_path)
