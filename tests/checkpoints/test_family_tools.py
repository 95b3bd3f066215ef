"""`bertfit inspect` says what a checkpoint of any family is: family, size, tokenizer, whether it
fine-tunes; an unsupported family gets one sentence, not a list of missing tensors. `bertfit
convert --to tf-hub` writes any family as TF Hub's encoder + preprocessing SavedModels."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.load import load_encoder
from bertfit.cli import main
from tests.families import write_family_checkpoint
from tests.tiny import sentiment_rows

pytest.importorskip("transformers")

TEXTS = [text for text, _ in sentiment_rows(60)]


@pytest.mark.parametrize(
    ("family", "name", "tokenizer"),
    [
        ("electra", "ELECTRA", "wordpiece"),
        ("distilbert", "DistilBERT", "wordpiece"),
        ("albert", "ALBERT", "sentencepiece"),
        ("deberta-v2", "DeBERTa-v3", "sentencepiece"),
        ("roberta", "RoBERTa", "bpe (byte-level)"),
        ("mpnet", "MPNet", "wordpiece"),
        ("gte", "GTE", "sentencepiece"),
        ("nomic_bert", "NomicBERT", "wordpiece"),
        ("eurobert", "EuroBERT", "bpe (byte-level)"),
        ("mmbert", "ModernBERT", "bpe (byte fallback)"),
    ],
)
def test_inspect_names_the_family_and_its_tokenizer(family, name, tokenizer, tmp_path, capsys):
    write_family_checkpoint(family, tmp_path, TEXTS)
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == name
    kind, _, style = tokenizer.partition(" ")
    assert (report["tokenizer"], report.get("bpe")) == (kind, style.strip("()") or None)
    assert report["fine_tunable"] is True
    assert report["parameters"] > 1000
    assert ("pooled_output" in report["outputs"]) == (family in ("albert", "roberta", "mpnet"))
    assert "default" in report["outputs"]
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"family:        {name}" in out and f"tokenizer:     {tokenizer}\n" in out


def test_an_unsupported_family_is_one_sentence(tmp_path, capsys):
    write_family_checkpoint("bert", tmp_path, TEXTS)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "longformer"}))
    main(["inspect", str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["fine_tunable"] is False
    (note,) = report["notes"]
    assert "'longformer' model" in note and "ModernBERT" in note and len(note) < 400


@pytest.mark.parametrize("family", ["roberta", "deberta-v2", "electra"])
def test_convert_to_tf_hub_keeps_the_family_and_its_tokenizer(family, tmp_path):
    write_family_checkpoint(family, tmp_path / "model", TEXTS, trainable=False)
    assert main(["convert", str(tmp_path / "model"), str(tmp_path / "hub"), "--to", "tf-hub",
                 "--seq-length", "16"]) == 0  # fmt: skip
    encoder, tokenizer = load_encoder(tmp_path / "model")
    preprocess = tf.saved_model.load(str(tmp_path / "hub" / "preprocess"))
    hub_encoder = tf.saved_model.load(str(tmp_path / "hub" / "encoder"))
    texts, pairs = ["a good film", "bad"], ["dull", "the plot is not boring"]
    theirs = preprocess(tf.constant(texts))
    ours = tokenizer(texts, max_seq_length=16)
    for name, value in ours.items():
        np.testing.assert_array_equal(theirs[name].numpy(), value.numpy())
    outputs = hub_encoder(dict(ours), False)
    expected = encoder(ours)
    np.testing.assert_allclose(
        outputs["sequence_output"].numpy(), expected["sequence_output"].numpy(), atol=1e-5
    )
    np.testing.assert_allclose(  # the native encoder has TF Hub's `default` output too
        outputs["default"].numpy(), expected["default"].numpy(), atol=1e-5
    )
    segments = [preprocess.tokenize(tf.constant(t)) for t in (texts, pairs)]
    packed = preprocess.bert_pack_inputs(segments, tf.constant(64))
    np.testing.assert_array_equal(
        packed["input_word_ids"].numpy(),
        tokenizer(texts, pairs, max_seq_length=64)["input_word_ids"].numpy(),
    )


def test_convert_to_hf_refuses_another_family_in_one_sentence(tmp_path, capsys):
    write_family_checkpoint("electra", tmp_path / "model", TEXTS)
    assert main(["convert", str(tmp_path / "model"), str(tmp_path / "hf"), "--to", "hf"]) == 2
    assert "ELECTRA encoder; convert --to hf writes BERT-architecture" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["distilbert", "xlm-roberta", "modernbert"])
def test_the_python_api_builds_a_classifier_and_preprocessor_for_any_family(family, tmp_path):
    from bertfit import BertClassifier, BertPreprocessor

    write_family_checkpoint(family, tmp_path, TEXTS)
    preprocessor = BertPreprocessor.from_checkpoint(str(tmp_path), seq_length=16)
    model = BertClassifier.from_checkpoint(str(tmp_path), num_classes=3, seed=0)
    logits = model(preprocessor(["a good film", "bad"]))
    assert logits.shape == (2, 3) and np.isfinite(logits.numpy()).all()


# ---- tokenizer files and config.json that do not belong to the weights beside them ----


def test_another_models_tokenizer_beside_bert_weights_is_warned(tmp_path, capsys):
    """An XLM-R-style Unigram tokenizer.json beside BERT weights, small enough that no id
    overflows: a model may be trained with any tokenizer on BERT's layers, so it is said (in
    the warning train prints and in inspect's notes), not refused."""
    from tests.families import train_tokenizer

    write_family_checkpoint("bert", tmp_path, TEXTS)
    rows = json.loads((tmp_path / "config.json").read_text())["vocab_size"]
    unigram = train_tokenizer("unigram", TEXTS, vocab_size=rows - 10, style="<s>")
    unigram.save_pretrained(tmp_path)  # replaces tokenizer.json and tokenizer_config.json
    with pytest.warns(UserWarning, match="sentencepiece tokenizer .* not the wordpiece tokeniz"):
        load_encoder(tmp_path)
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == "BERT" and report["tokenizer"] == "sentencepiece"
    assert any("not the wordpiece tokenizer BERT checkpoints ship" in n for n in report["notes"])


def test_a_family_that_ships_two_kinds_of_tokenizer_warns_of_a_third_only(tmp_path):
    """GTE's English checkpoints ship BERT's WordPiece, its multilingual one XLM-R's
    SentencePiece: both load quietly; a byte-level BPE beside its weights is warned."""
    import warnings

    import transformers

    from tests.families import TINY, train_tokenizer

    config = transformers.GteConfig(**{**TINY, "vocab_size": 400})
    transformers.GteModel(config).save_pretrained(tmp_path)
    train_tokenizer("wordpiece", TEXTS).save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_encoder(tmp_path)
    train_tokenizer("bpe", TEXTS, style="<s>").save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="not the sentencepiece or wordpiece tokenizer GTE"):
        load_encoder(tmp_path)


def test_a_tokenizer_larger_than_the_embedding_table_is_refused_before_anything_is_written(
    tmp_path, capsys
):
    from tests.families import write_family_model

    write_family_checkpoint("roberta", tmp_path / "tokenizer", TEXTS)  # 300 ids
    write_family_model("bert", tmp_path / "model")  # 99 rows
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "model" / name).write_bytes((tmp_path / "tokenizer" / name).read_bytes())
    data = tmp_path / "train.csv"
    data.write_text("text,label\n" + "".join(f"film {i},{i % 2}\n" for i in range(8)))
    code = main(["train", "--model", str(tmp_path / "model"), "--train", str(data),
                 "--output-dir", str(tmp_path / "run"), "--max-seq-length", "16"])  # fmt: skip
    assert code == 2
    error = capsys.readouterr().err
    assert "(300 ids) does not fit the word embedding table" in error and "99 rows" in error
    assert "Traceback" not in error and not (tmp_path / "run").exists()


def test_a_config_without_model_type_is_read_from_its_architectures(tmp_path):
    from bertfit.checkpoints.inspect import inspect_checkpoint
    from bertfit.errors import CheckpointError

    write_family_checkpoint("albert", tmp_path, TEXTS)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["model_type"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    encoder, _ = load_encoder(tmp_path)
    assert encoder.config.model_type == "albert"
    notes = inspect_checkpoint(tmp_path)["notes"]
    assert "read as ALBERT from its architectures ['AlbertModel']" in " ".join(notes)

    for architectures, says in [
        (["GPT2Model"], "do not name one family"),
        (["AlbertModel", "BertModel"], "do not name one family"),
        (None, "missing 50 required tensors"),  # read as BERT: no ALBERT layer is found
    ]:
        (tmp_path / "config.json").write_text(
            json.dumps({**config, "architectures": architectures})
        )
        with pytest.raises(CheckpointError, match=says):
            load_encoder(tmp_path)
