"""The SentencePiece tokenizer as the pipeline and exports use it: save and reload, tf.data,
tf.function, a SavedModel loaded with only tensorflow_text, and its errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tensorflow as tf

from bertfit.errors import CheckpointError, InputFormatError
from bertfit.text.loading import load_tokenizer, tokenizer_kind
from tests.text.sentencepiece_files import write_family
from tests.text.test_tokenizer_parity import NASTY
from tests.tiny import sentiment_rows

pytest.importorskip("sentencepiece")
pytest.importorskip("transformers")

SAMPLE = ["a great film", "dull <mask> and  slow ", "", *NASTY[:12]]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spm")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(text for text, _ in sentiment_rows(400)) + "\n" + "\n".join(NASTY))
    return write_family(folder, "xlm-roberta", corpus, 200)


@pytest.fixture(scope="module")
def tokenizer(folders):
    return load_tokenizer(folders[1])


def test_save_and_load_give_the_same_ids(tokenizer, folders, tmp_path):
    tokenizer.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.tokenize(SAMPLE).to_list() == tokenizer.tokenize(SAMPLE).to_list()
    assert again.special_ids == tokenizer.special_ids
    bare = load_tokenizer(folders[0])  # the bare sentencepiece.bpe.model, fairseq ids
    assert bare.tokenize(SAMPLE).to_list() == tokenizer.tokenize(SAMPLE).to_list()


def test_interface(tokenizer):
    assert tokenizer.kind == "sentencepiece"
    assert tokenizer.special_ids == {
        "cls_id": 0, "sep_id": 2, "pad_id": 1, "pair_separators": 2, "second_type_id": 0,
    }  # fmt: skip
    assert (tokenizer.unk_id, tokenizer.id_to_token(3), tokenizer.token_to_id("<mask>")) == (
        3, "<unk>", tokenizer.vocab_size - 1,
    )  # fmt: skip
    assert tokenizer.tokenize("a great film").shape.rank == 1
    inputs = tokenizer(["a great film"], ["dull"], max_seq_length=12)
    assert inputs["input_word_ids"].numpy()[0, 0] == 0
    assert inputs["input_type_ids"].numpy().tolist() == [[0] * 12]
    with pytest.raises(InputFormatError, match="tokenize_words"):
        tokenizer.tokenize_words(["a"])
    with pytest.raises(InputFormatError, match="raw text"):
        tokenizer.tokenize([1, 2])


def test_runs_in_tf_data_and_tf_function(tokenizer):
    expected = tokenizer(SAMPLE, max_seq_length=16)["input_word_ids"].numpy().tolist()
    dataset = tf.data.Dataset.from_tensor_slices(SAMPLE).batch(4)
    mapped = dataset.map(lambda texts: tokenizer(texts, max_seq_length=16)["input_word_ids"])
    assert [row for batch in mapped for row in batch.numpy().tolist()] == expected
    packed = tf.function(lambda texts: tokenizer(texts, max_seq_length=16)["input_word_ids"])
    assert packed(tf.constant(SAMPLE)).numpy().tolist() == expected


def test_saved_model_loads_with_only_tensorflow_text(tokenizer, tmp_path):
    module = tf.Module()
    module.tokenizer = tokenizer
    module.serve = tf.function(
        lambda texts: tokenizer(texts, max_seq_length=16)["input_word_ids"],
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    expected = tokenizer(SAMPLE, max_seq_length=16)["input_word_ids"].numpy().tolist()
    script = (
        "import sys, json, tensorflow as tf, tensorflow_text\n"
        f"model = tf.saved_model.load({str(tmp_path / 'saved')!r})\n"
        f"print(json.dumps(model.serve(tf.constant({SAMPLE!r})).numpy().tolist()))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "bertfit" not in result.stderr
    assert eval(result.stdout.strip().splitlines()[-1]) == expected


def test_a_folder_without_tokenizer_files_names_what_it_looked_for(tmp_path):
    assert tokenizer_kind(tmp_path) is None
    with pytest.raises(CheckpointError, match="tokenizer.json, vocab.txt, spiece.model"):
        load_tokenizer(tmp_path)


def test_wordpiece_save_and_load_give_the_same_ids(minilm_dir, tmp_path):
    original = load_tokenizer(minilm_dir)
    original.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.kind == "wordpiece" and again.config == original.config
    assert again.tokenize(NASTY).to_list() == original.tokenize(NASTY).to_list()
