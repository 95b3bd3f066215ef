"""MiniLM-L6 through `convert --to tf-hub` into hub.KerasLayer (tf_keras), and `--to hf` into
transformers; both match bertfit within 1e-5."""

import argparse
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bertfit.checkpoints.commands import add_commands
from bertfit.checkpoints.load import load_encoder

pytestmark = pytest.mark.slow

TEXTS = ["a gripping, beautifully shot film", "the plot goes nowhere", "fine."]

# tf_keras and Keras 3 do not share a process well, so hub.KerasLayer runs in a child. The shim
# stands in for `pkg_resources`, which tensorflow_hub 0.16 imports and new setuptools dropped.
HUB_SCRIPT = textwrap.dedent("""
    import sys, types, json
    import numpy as np
    from packaging.version import parse
    shim = types.ModuleType("pkg_resources"); shim.parse_version = parse
    sys.modules.setdefault("pkg_resources", shim)
    import tensorflow as tf, tf_keras, tensorflow_hub as hub
    path, data = sys.argv[1], np.load(sys.argv[2])
    inputs = {k: tf_keras.Input([None], dtype=tf.int32, name=k)
              for k in ("input_word_ids", "input_mask", "input_type_ids")}
    layer = hub.KerasLayer(path, trainable=True)
    outputs = layer(inputs)
    logits = tf_keras.layers.Dense(2)(outputs["pooled_output"])
    model = tf_keras.Model(inputs, [logits, outputs["pooled_output"], outputs["sequence_output"]])
    feed = {k: tf.constant(data[k]) for k in inputs}
    _, pooled, sequence = model(feed, training=False)
    before = [v.numpy().copy() for v in layer.trainable_variables]
    with tf.GradientTape() as tape:
        logits = model(feed, training=True)[0]
        loss = tf.reduce_mean(tf_keras.losses.sparse_categorical_crossentropy(
            tf.constant([0, 1, 0]), logits, from_logits=True))
    grads = tape.gradient(loss, layer.trainable_variables)
    tf_keras.optimizers.SGD(0.1).apply_gradients(zip(grads, layer.trainable_variables))
    changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, layer.trainable_variables)]
    print(json.dumps({
        "pooled": float(np.abs(pooled.numpy() - data["pooled_output"]).max()),
        # Real tokens only: outputs at padded positions carry no meaning in any BERT.
        "sequence": float(np.abs(sequence.numpy() - data["sequence_output"])[
            data["input_mask"].astype(bool)].max()),
        "variables": len(layer.trainable_variables),
        "none_grads": sum(g is None for g in grads), "changed": sum(changed)}))
""")


def _cli(*argv):
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return args.handler(args)


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    encoder, tokenizer = load_encoder(minilm_dir)
    inputs = {k: v.numpy() for k, v in tokenizer(TEXTS, max_seq_length=16).items()}
    outputs = encoder(inputs)
    return encoder, inputs, {k: outputs[k].numpy() for k in ("pooled_output", "sequence_output")}


def test_tf_hub_export_fine_tunes_in_hub_keras_layer_and_reloads(minilm, minilm_dir, tmp_path):
    encoder, inputs, expected = minilm
    assert _cli("convert", minilm_dir, str(tmp_path / "hub"), "--to", "tf-hub") == 0
    np.savez(tmp_path / "data.npz", **inputs, **expected)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            HUB_SCRIPT,
            str(tmp_path / "hub" / "encoder"),
            str(tmp_path / "data.npz"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["pooled"] < 1e-5 and report["sequence"] < 1e-5
    assert report["variables"] == len(encoder.named_variables())
    assert report["none_grads"] == 0 and report["changed"] == report["variables"]

    reloaded, tokenizer = load_encoder(tmp_path / "hub" / "encoder")
    assert reloaded.load_report.format == "tf2-savedmodel"
    for name, variable in encoder.named_variables().items():
        np.testing.assert_array_equal(reloaded.named_variables()[name].numpy(), variable.numpy())
    assert tokenizer.vocab_size == 30522

    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the preprocessing model's ops

    preprocess = tf.saved_model.load(str(tmp_path / "hub" / "preprocess"))
    packed = preprocess(tf.constant(TEXTS))
    np.testing.assert_array_equal(packed["input_word_ids"][:, :16], inputs["input_word_ids"])


def test_hf_export_loads_in_transformers(minilm, minilm_dir, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    _, inputs, expected = minilm
    assert _cli("convert", minilm_dir, str(tmp_path / "hf"), "--to", "hf") == 0
    model = transformers.BertModel.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(inputs["input_type_ids"], dtype=torch.long),
        )
    mask = inputs["input_mask"][..., None].astype(bool)
    np.testing.assert_allclose(
        np.where(mask, out.last_hidden_state.numpy(), 0),
        np.where(mask, expected["sequence_output"], 0),
        atol=1e-5,
    )
    np.testing.assert_allclose(out.pooler_output.numpy(), expected["pooled_output"], atol=1e-5)
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"]


def test_inspect_minilm_json(minilm_dir, capsys):
    assert _cli("inspect", minilm_dir, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "hf" and report["architecture"]["layers"] == 6
    assert report["vocab"]["casing"] == "uncased"
