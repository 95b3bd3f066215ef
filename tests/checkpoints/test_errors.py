"""Each failure names what was found, why it fails, and the fix."""

import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.archive import extract
from bertfit.checkpoints.load import load_encoder, read_checkpoint
from bertfit.checkpoints.savedmodel import SavedModelEncoder
from bertfit.errors import CheckpointError, MissingDependencyError
from bertfit.model.encoder import BertEncoder
from tests.tiny import (
    TINY_VOCAB,
    tiny_inputs,
    write_tiny_hf,
    write_tiny_savedmodel,
    write_tiny_tf1,
    write_vocab,
)


def test_signature_only_savedmodel_is_refused_for_training_and_offered_frozen(tmp_path):
    source = write_tiny_savedmodel(tmp_path, signature_only=True)
    with pytest.raises(CheckpointError, match="zero trainable variables") as e:
        read_checkpoint(tmp_path)
    assert "train nothing" in str(e.value) and "load_frozen" in str(e.value)
    frozen, _ = load_encoder(tmp_path, trainable=False)
    assert isinstance(frozen, SavedModelEncoder) and frozen.trainable_weights == []
    inputs = tiny_inputs()
    assert (
        abs(frozen(inputs)["pooled_output"] - source(inputs)["pooled_output"]).numpy().max() < 1e-5
    )


def _write_tf1_savedmodel(path: Path, inputs: tuple[str, str, str]) -> np.ndarray:
    """A TF1 SavedModel (`tf.compat.v1.saved_model.Builder`: a graph and a serving_default
    signature, no object graph) computing a pooled_output and sequence_output from three int32
    inputs named `inputs`; returns its embedding table."""
    v1 = tf.compat.v1
    table = np.random.default_rng(0).normal(size=(41, 8)).astype("float32")
    with tf.Graph().as_default():
        embeddings = v1.get_variable("bert/embeddings", initializer=tf.constant(table))
        ids, mask, types = (v1.placeholder(tf.int32, [None, None], name=n) for n in inputs)
        sequence = tf.gather(embeddings, ids) * tf.cast(mask + 0 * types, tf.float32)[..., None]
        pooled = tf.tanh(sequence[:, 0])
        build = v1.saved_model.utils.build_tensor_info
        signature = v1.saved_model.signature_def_utils.build_signature_def(
            {name: build(t) for name, t in zip(inputs, (ids, mask, types), strict=True)},
            {"pooled_output": build(pooled), "sequence_output": build(sequence)},
            "tensorflow/serving/predict",
        )
        builder = v1.saved_model.Builder(str(path))
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            builder.add_meta_graph_and_variables(
                session, ["serve"], signature_def_map={"serving_default": signature}
            )
        builder.save()
    write_vocab(path)
    return table


def test_a_tf1_savedmodel_is_labelled_tf1_and_loads_frozen_as_its_message_says(tmp_path):
    from bertfit.checkpoints.detect import detect
    from bertfit.checkpoints.inspect import inspect_checkpoint
    from bertfit.checkpoints.savedmodel import load_frozen

    table = _write_tf1_savedmodel(tmp_path, ("input_word_ids", "input_mask", "input_type_ids"))
    assert detect(tmp_path).format == "tf1-savedmodel-signature"
    report = inspect_checkpoint(tmp_path)
    assert report["format"] == "tf1-savedmodel-signature" and report["fine_tunable"] is False
    assert "TF1 SavedModel" in report["description"]
    with pytest.raises(CheckpointError, match="is a TF1 SavedModel") as e:
        read_checkpoint(tmp_path)
    assert "load_frozen(path)" in str(e.value) and "trainable=False" in str(e.value)
    inputs = tiny_inputs()
    ids = inputs["input_word_ids"].numpy()
    expected = np.tanh(table[ids[:, 0]] * inputs["input_mask"].numpy()[:, :1])
    for frozen in (load_frozen(tmp_path), load_encoder(tmp_path, trainable=False)[0]):
        assert frozen.trainable_weights == []
        np.testing.assert_allclose(frozen(inputs)["pooled_output"], expected, atol=1e-6)


def test_a_tf1_savedmodel_with_other_input_names_is_not_offered_load_frozen(tmp_path):
    _write_tf1_savedmodel(tmp_path, ("input_ids", "input_mask", "segment_ids"))
    with pytest.raises(CheckpointError, match="is a TF1 SavedModel") as e:
        read_checkpoint(tmp_path)
    assert "load_frozen" not in str(e.value) and "hub.KerasLayer(path, signature=" in str(e.value)
    with pytest.raises(CheckpointError, match="cannot run it even frozen"):
        load_encoder(tmp_path, trainable=False)


def test_preprocessing_model_given_as_encoder(tf_hub_export):
    with pytest.raises(CheckpointError, match="preprocessing model") as e:
        load_encoder(tf_hub_export / "preprocess")
    assert "Pass the encoder SavedModel" in str(e.value)


def test_vocab_larger_than_the_embedding_matrix(tmp_path):
    write_tiny_hf(tmp_path)
    write_vocab(tmp_path, TINY_VOCAB + ["extra", "more"])
    with pytest.raises(
        CheckpointError, match=r"43 tokens but the word embedding matrix .* 41 rows"
    ) as e:
        load_encoder(tmp_path)
    assert "use the vocab.txt shipped" in str(e.value)


def test_uncased_model_with_capitals_in_its_vocab_warns_with_examples(tmp_path):
    vocab = TINY_VOCAB[:-3] + ["The", "London", "Paris"]
    write_tiny_hf(tmp_path)
    write_vocab(tmp_path, vocab)
    with pytest.warns(UserWarning, match=r"uncased .* 'The', 'London', 'Paris'.*lower_case=False"):
        load_encoder(tmp_path)


def test_unknown_folder_lists_what_it_found_and_what_is_expected(tmp_path):
    (tmp_path / "weights.h5").write_bytes(b"\x89HDF")
    with pytest.raises(CheckpointError, match=r"found weights\.h5.*Expected one of"):
        load_encoder(tmp_path)


def test_truncated_tf1_checkpoint(tmp_path):
    write_tiny_tf1(tmp_path)
    data = next(tmp_path.glob("bert_model.ckpt.data-*"))
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="missing or truncated"):
        load_encoder(tmp_path)


def test_tf1_module_where_tf2_savedmodel_was_expected(tmp_path):
    from tests.tiny import write_tiny_hub_module

    write_tiny_hub_module(tmp_path / "m")
    with pytest.raises(CheckpointError, match="TF1 Hub module") as e:
        SavedModelEncoder(tmp_path / "m")
    assert "reads the module's variables into the native encoder" in str(e.value)
    encoder, _ = load_encoder(tmp_path / "m")  # what bertfit does instead
    assert isinstance(encoder, BertEncoder)


def test_torch_bin_without_torch_is_refused_with_the_safetensors_recipe(tmp_path, monkeypatch):
    from tests.tiny import write_tiny_torch_bin

    write_tiny_torch_bin(tmp_path)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match="never unpickles") as e:
        load_encoder(tmp_path)
    assert "safe_serialization=True" in str(e.value)


def test_torch_bin_with_pickled_objects_is_refused(tmp_path):
    import torch

    write_tiny_hf(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save({"weights": io.BytesIO(b"x")}, str(tmp_path / "pytorch_model.bin"))
    with pytest.raises(CheckpointError, match="weights_only=True"):
        load_encoder(tmp_path)


def _tar(path, name, data=b"x", link=None):
    with tarfile.open(path, "w:gz") as t:
        info = tarfile.TarInfo(name)
        if link:
            info.type, info.linkname = tarfile.SYMTYPE, link
            t.addfile(info)
        else:
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(
    "name, link, why",
    [
        ("../evil.txt", None, "climbs out"),
        ("/tmp/evil.txt", None, "absolute path"),
        ("model/vocab.txt", "../../../etc/passwd", "links to"),
    ],
)
def test_unsafe_tar_members_are_refused(tmp_path, name, link, why):
    archive = _tar(tmp_path / "m.tar.gz", name, link=link)
    with pytest.raises(CheckpointError, match=why):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_unsafe_zip_member_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "m.zip", "w") as z:
        z.writestr("../evil.txt", "x")
    with pytest.raises(CheckpointError, match="climbs out"):
        extract(tmp_path / "m.zip", tmp_path / "out")


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_archives_of_a_checkpoint_load(tmp_path, monkeypatch, suffix):
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "uncased_tiny"
    model.mkdir()
    source = write_tiny_tf1(model)
    archive = tmp_path / f"model{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(archive, "w") as z:
            for f in model.iterdir():
                z.write(f, f"uncased_tiny/{f.name}")
    else:
        with tarfile.open(archive, "w:gz") as t:
            t.add(model, "uncased_tiny")
    encoder, _ = load_encoder(archive)
    inputs = tiny_inputs()
    assert (
        abs(encoder(inputs)["pooled_output"] - source(inputs)["pooled_output"]).numpy().max() < 1e-5
    )
    assert encoder.checkpoint_detection.archive == archive


def test_a_zip_bomb_is_refused_before_anything_is_written(tmp_path):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("model/model.safetensors", b"\0" * (64 * 2**20))  # 64 MiB of zeros -> 64 KB
    with pytest.raises(CheckpointError, match="decompression bomb"):
        extract(archive, tmp_path / "out")
    assert list(tmp_path.iterdir()) == [archive]


def test_the_extracted_size_limit_names_its_variable(tmp_path, monkeypatch):
    archive = _tar(tmp_path / "m.tar.gz", "model/vocab.txt", data=os.urandom(4096))
    monkeypatch.setenv("BERTFIT_MAX_EXTRACT", "1000")
    with pytest.raises(CheckpointError, match="BERTFIT_MAX_EXTRACT"):
        extract(archive, tmp_path / "out")
    monkeypatch.setenv("BERTFIT_MAX_EXTRACT", "5000")
    assert (extract(archive, tmp_path / "out") / "model" / "vocab.txt").stat().st_size == 4096


def test_too_many_members_are_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "m.zip", "w") as z:
        for i in range(10_001):
            z.writestr(f"f{i}", os.urandom(8))
    with pytest.raises(CheckpointError, match="10,001 entries"):
        extract(tmp_path / "m.zip", tmp_path / "out")


def test_a_failed_extraction_leaves_nothing_behind(tmp_path, monkeypatch):
    archive = _tar(tmp_path / "m.tar.gz", "model/vocab.txt", data=os.urandom(100_000))
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[:20_000])  # truncated download
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        extract(cut, tmp_path / "cache" / "out")
    assert not (tmp_path / "cache").exists()

    def disk_full(self, path, **kwargs):
        Path(path, "model").mkdir()
        Path(path, "model", "vocab.txt").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "extractall", disk_full)
    with pytest.raises(CheckpointError, match="No space left"):
        extract(archive, tmp_path / "cache" / "out")
    assert list((tmp_path / "cache").iterdir()) == []


def test_inspect_says_not_fine_tunable_when_config_and_weights_disagree_or_vocab_is_missing(
    tmp_path,
):
    import dataclasses
    import json

    from bertfit.checkpoints.inspect import inspect_checkpoint
    from tests.tiny import TINY_CONFIG, write_tiny_hf

    for name in ("ok", "bigger", "no-vocab"):
        (tmp_path / name).mkdir()
    write_tiny_hf(tmp_path / "ok")
    assert inspect_checkpoint(tmp_path / "ok")["fine_tunable"] is True

    write_tiny_hf(tmp_path / "bigger")
    config = dataclasses.replace(TINY_CONFIG, hidden_size=64)
    (tmp_path / "bigger" / "config.json").write_text(json.dumps(config.to_hf_dict()))
    report = inspect_checkpoint(tmp_path / "bigger")
    assert report["fine_tunable"] is False
    assert any("do not fit the config" in note for note in report["notes"])

    write_tiny_hf(tmp_path / "no-vocab")
    (tmp_path / "no-vocab" / "vocab.txt").unlink()
    report = inspect_checkpoint(tmp_path / "no-vocab")
    assert report["fine_tunable"] is False
    assert any("no tokenizer files (vocab.txt" in note for note in report["notes"])
