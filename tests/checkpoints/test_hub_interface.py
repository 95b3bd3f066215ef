"""TF Hub's interfaces as TF Hub's own models have them: round-robin pair trimming in
`bert_pack_inputs`, the preprocessing signature's `sentences` input, truthful advice for
signature-only models, and `bertfit.check` on a strings-in tf_keras model built the TF Hub way
(preprocessing `hub.KerasLayer` → encoder `hub.KerasLayer`, in a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.checks.model import SIGNATURE_ONLY_WHY, signature_only_fix
from bertfit.text.preprocessor import BertPreprocessor, round_robin_lengths
from bertfit.text.tokenizer import BertTokenizer
from tests.tiny import write_tiny_savedmodel, write_vocab

ROOT = Path(__file__).resolve().parents[2]


def test_round_robin_lengths_match_tensorflow_texts_trimmer():
    import tensorflow_text as text

    rng = np.random.default_rng(0)
    len_a, len_b = rng.integers(0, 30, 2000), rng.integers(0, 30, 2000)
    a = tf.RaggedTensor.from_row_lengths(tf.zeros([len_a.sum()], tf.int32), len_a)
    b = tf.RaggedTensor.from_row_lengths(tf.zeros([len_b.sum()], tf.int32), len_b)
    budget = 32 - 3
    want = text.RoundRobinTrimmer(max_seq_length=budget).trim([a, b])
    got = round_robin_lengths(a.row_lengths(), b.row_lengths(), tf.constant(budget, tf.int64))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w.row_lengths())


def test_bert_pack_inputs_trims_pairs_as_tf_hub_and_the_call_as_training_does(tmp_path):
    tokenizer = BertTokenizer(write_vocab(tmp_path))
    preprocessor = BertPreprocessor(tokenizer, seq_length=8)
    texts, pairs = ["good film was fun"], ["bad plot is not fun"]  # 4 + 5 words, budget 5
    packed = preprocessor.bert_pack_inputs(
        [preprocessor.tokenize(texts), preprocessor.tokenize(pairs)]
    )
    types = packed["input_type_ids"].numpy()[0].tolist()
    assert types == [0, 0, 0, 0, 0, 1, 1, 1]  # [CLS] 3 of a [SEP] | 2 of b [SEP]: round robin
    trained = preprocessor((texts, pairs))["input_type_ids"].numpy()[0].tolist()
    assert trained == [0, 0, 0, 0, 1, 1, 1, 1]  # HF's longest-first: b, the longer, keeps 3


def test_preprocess_savedmodel_signature_takes_sentences(tf_hub_export):
    preprocess = tf.saved_model.load(str(tf_hub_export / "preprocess"))
    signature = preprocess.signatures["serving_default"]
    assert list(signature.structured_input_signature[1]) == ["sentences"]
    out = signature(sentences=tf.constant(["a good film"]))
    assert out["input_word_ids"].shape == (1, 16)


def test_signature_only_advice_is_truthful_for_tf1_and_tf2():
    assert "silently" not in SIGNATURE_ONLY_WHY and "ValueError" in SIGNATURE_ONLY_WHY
    assert "load_encoder(path, trainable=False)" in signature_only_fix(tf1=False)
    tf1 = signature_only_fix(tf1=True)  # loads frozen only through the encoder's inputs
    assert "load_encoder(path, trainable=False) when its serving_default" in tf1
    assert "hub.KerasLayer" in tf1


def test_a_tf1_signature_only_error_does_not_offer_a_call_that_refuses_it(tmp_path):
    from bertfit.checkpoints.savedmodel import SavedModelInfo, signature_only_error

    info = SavedModelInfo("tf2-savedmodel-signature", True, [], 0, {}, [])
    message = str(signature_only_error(tmp_path, info))
    assert "load_frozen" not in message and "trainable=False" not in message
    assert "silently" not in message


def test_an_unknown_activation_memory_is_not_reported_as_zero():
    from bertfit.checks.findings import Report

    report = Report(target="cpu")
    report.memory = {
        "parameters": 10,
        "parameters_bytes": 40,
        "training_state_bytes": 120,
        "activations_bytes": {},
    }
    text = report.render(color=False)
    assert "up to 0.0" not in text and "not estimated" in text


SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf, tensorflow_hub as hub, tensorflow_text  # noqa: F401
    import bertfit
    preprocess_path, encoder_path, signature_only = sys.argv[1:4]
    preprocess = hub.KerasLayer(preprocess_path)
    encoder = hub.KerasLayer(encoder_path, trainable=True)
    text = tf.keras.layers.Input(shape=(), dtype=tf.string)
    pooled = encoder(preprocess(text))["pooled_output"]
    model = tf.keras.Model(text, tf.keras.layers.Dense(2)(pooled))
    texts = ["a good film", "bad plot"] * 4
    ds = tf.data.Dataset.from_tensor_slices((texts, [1, 0] * 4)).batch(8, drop_remainder=True)
    report = bertfit.check(dataset=ds, model=model)
    try:  # what tensorflow-hub does with a signature-only SavedModel and trainable=True
        names = ("input_word_ids", "input_mask", "input_type_ids")
        inputs = {n: tf.keras.layers.Input((8,), dtype=tf.int32, name=n) for n in names}
        hub.KerasLayer(signature_only, trainable=True)(inputs)
        refused = None
    except ValueError as e:
        refused = str(e)
    print(json.dumps({"codes": report.codes, "memory": report.memory, "refused": refused,
                      "text": report.render(color=False)}))
""")


def test_check_runs_every_check_on_a_strings_in_tf_hub_model(tf_hub_export, tmp_path):
    write_tiny_savedmodel(tmp_path / "signature_only", signature_only=True)
    env = {
        **os.environ,
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(tf_hub_export / "preprocess"),
            str(tf_hub_export / "encoder"),
            str(tmp_path / "signature_only"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    codes = set(result["codes"])
    assert not {"input-key-names", "input-raw-strings", "grad-signature-only"} & codes, codes
    assert not {"grad-none", "grad-step-failed", "grad-frozen-encoder"} & codes, codes
    assert "compile-strings-in-step" in codes  # the compile check ran, and says why it fails
    assert max(result["memory"]["activations_bytes"].values()) > 0  # [8, 16] from preprocessing
    assert "up to 0.0" not in result["text"]
    assert result["refused"] is not None  # hub.KerasLayer raises: nothing trains "silently"


def test_a_tf1_model_in_a_hub_keras_layer_gets_the_tf1_fix(tmp_path):
    from bertfit.checks.findings import Report
    from bertfit.checks.model import TF1_SIGNATURE_ONLY_FIX, no_encoder_variables
    from tests.tiny import write_tiny_hub_module

    write_tiny_hub_module(tmp_path / "module")

    class KerasLayer:  # what check sees of tensorflow-hub's layer: its name, weights, path
        name, weights, trainable_weights = "keras_layer", [], []
        _handle = str(tmp_path / "module")

    report = Report()
    no_encoder_variables(report, KerasLayer(), "model")
    (finding,) = report.findings
    assert finding.code == "grad-signature-only" and finding.fix == TF1_SIGNATURE_ONLY_FIX
