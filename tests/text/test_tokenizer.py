"""BertTokenizer on a tiny vocabulary: each test pins one rule of the HF BERT pipeline."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.errors import CheckpointError, InputFormatError
from bertfit.text import BertTokenizer, TokenizerConfig

VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    ",", ".", "!", "$", "[", "]",
    "hello", "world", "##world", "un", "##aff", "##able", "cafe", "café", "Hello", "naive",
    "ß", "ss", "σισυφοσ", "中", "文", "a", "##a", "ж", "##ж", "i", "##stanbul",
]  # fmt: skip


def ids(*tokens: str) -> list[int]:
    return [VOCAB.index(token) for token in tokens]


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def tokenizer(vocab_file):
    return BertTokenizer(vocab_file)


def tokenize(tokenizer: BertTokenizer, text: str) -> list[int]:
    return tokenizer.tokenize([text]).to_list()[0]


def test_punctuation_is_its_own_word(tokenizer):
    assert tokenize(tokenizer, "hello,world!") == ids("hello", ",", "world", "!")
    assert tokenize(tokenizer, "$hello") == ids("$", "hello")  # ASCII symbols count too
    assert tokenize(tokenizer, "hello\u2013world") == ids("hello", "[UNK]", "world")  # dash, Pd


def test_lowercasing_strips_accents_without_case_folding(tokenizer):
    assert tokenize(tokenizer, "Café NAÏVE") == ids("cafe", "naive")
    assert tokenize(tokenizer, "ß") == ids("ß")  # case folding would give "ss"
    assert tokenize(tokenizer, "İstanbul") == ids("i", "##stanbul")


def test_capital_sigma_always_lowers_to_medial_sigma(tokenizer):
    assert tokenize(tokenizer, "ΣΊΣΥΦΟΣ") == ids("σισυφοσ")  # never the final form ς


def test_cased_tokenizer_keeps_case_and_accents(vocab_file):
    cased = BertTokenizer(vocab_file, lower_case=False)
    assert tokenize(cased, "Hello café") == ids("Hello", "café")
    stripped = BertTokenizer(vocab_file, lower_case=False, strip_accents=True)
    assert tokenize(stripped, "Hello café") == ids("Hello", "cafe")


def test_cjk_ideographs_are_words(tokenizer):
    assert tokenize(tokenizer, "hello中文world") == ids("hello", "中", "文", "world")


def test_wordpiece_uses_longest_pieces_or_one_unknown(tokenizer):
    assert tokenize(tokenizer, "unaffable") == ids("un", "##aff", "##able")
    assert tokenize(tokenizer, "unaffablex") == ids("[UNK]")
    assert tokenize(tokenizer, "zebra") == ids("[UNK]")


def test_word_length_limit_counts_characters_not_bytes(tokenizer):
    assert tokenize(tokenizer, "ж" * 60) == ids("ж") + ids("##ж") * 59  # 120 bytes
    assert tokenize(tokenizer, "a" * 100) == ids("a") + ids("##a") * 99
    assert tokenize(tokenizer, "a" * 101) == ids("[UNK]")
    assert tokenize(tokenizer, "á" * 100) == ids("a") + ids("##a") * 99  # counted once stripped


def test_max_chars_per_word_is_configurable(vocab_file):
    short = BertTokenizer(vocab_file, max_chars_per_word=5)
    assert tokenize(short, "aaaaa aaaaaa") == ids("a", "##a", "##a", "##a", "##a", "[UNK]")


def test_control_and_invisible_characters_are_dropped(tokenizer):
    text = "\ufeffhel\x00lo\x07 wor\u200bld\u200d\x1b\ufffd"
    assert tokenize(tokenizer, text) == ids("hello", "world")
    assert tokenizer.tokenize([b"hello\xffworld"]).to_list()[0] == ids("hello", "##world")


def test_unicode_spaces_separate_words(tokenizer):
    for space in ["\u00a0", "\u2028", "\u3000", "\t", "\r\n"]:
        assert tokenize(tokenizer, f"hello{space}world") == ids("hello", "world"), repr(space)


def test_special_tokens_in_text_stay_whole(tokenizer):
    assert tokenize(tokenizer, "hello [MASK] world[SEP]") == ids(
        "hello", "[MASK]", "world", "[SEP]"
    )
    assert tokenize(tokenizer, "[mask]") == ids("[", "[UNK]", "]")  # matched before lowercasing


def test_empty_and_blank_texts_have_no_ids(tokenizer):
    assert tokenizer.tokenize(["", "   ", "\n\t"]).to_list() == [[], [], []]


def test_call_packs_single_texts(tokenizer):
    inputs = tokenizer(["hello world", "a"], max_seq_length=5)
    assert inputs["input_word_ids"].numpy().tolist() == [
        ids("[CLS]", "hello", "world", "[SEP]", "[PAD]"),
        ids("[CLS]", "a", "[SEP]", "[PAD]", "[PAD]"),
    ]
    assert inputs["input_mask"].numpy().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]
    assert inputs["input_type_ids"].numpy().tolist() == [[0] * 5, [0] * 5]


def test_call_packs_and_truncates_pairs(tokenizer):
    inputs = tokenizer(["hello world hello"], ["a a a a"], max_seq_length=8)
    assert inputs["input_word_ids"].numpy().tolist() == [
        ids("[CLS]", "hello", "world", "[SEP]", "a", "a", "a", "[SEP]")
    ]
    assert inputs["input_type_ids"].numpy().tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]]


def test_outputs_are_int32_with_static_length(tokenizer):
    inputs = tokenizer(["hello", "world"], max_seq_length=12)
    for name, tensor in inputs.items():
        assert tensor.dtype == tf.int32, name
        assert tensor.shape == (2, 12), name
    assert tokenizer.tokenize(["hello"]).dtype == tf.int32


def test_padding_longest_pads_to_the_batch(tokenizer):
    inputs = tokenizer(["hello world", "a"], max_seq_length=12, padding="longest")
    assert inputs["input_word_ids"].shape == (2, 4)


def test_single_string_gives_unbatched_outputs(tokenizer):
    assert tokenizer.tokenize("hello world").numpy().tolist() == ids("hello", "world")
    inputs = tokenizer("hello", max_seq_length=4)
    assert inputs["input_word_ids"].numpy().tolist() == ids("[CLS]", "hello", "[SEP]", "[PAD]")


@pytest.mark.parametrize(
    "texts",
    [
        ["hello", "world"],
        ("hello", "world"),
        np.array(["hello", "world"]),
        np.array([b"hello", b"world"]),
        np.array(["hello", "world"], dtype=object),
        tf.constant(["hello", "world"]),
    ],
)
def test_accepts_lists_arrays_and_tensors(tokenizer, texts):
    assert tokenizer.tokenize(texts).to_list() == [ids("hello"), ids("world")]


@pytest.mark.parametrize(
    "texts",
    [None, [101, 102], ["hello", 7], np.array([101, 102]), tf.constant([101, 102]),
     tf.constant([["a", "b"]]), tf.ragged.constant([["a"], ["b", "c"]]), [["hello"]]],
)  # fmt: skip
def test_rejects_ids_and_other_non_text(tokenizer, texts):
    with pytest.raises(InputFormatError):
        tokenizer(texts)


def test_rejects_non_text_pairs(tokenizer):
    with pytest.raises(InputFormatError, match="text_pairs|texts"):
        tokenizer(["hello"], [7])


def test_runs_inside_tf_data_map(tokenizer):
    texts = ["hello world", "unaffable", "中文", ""]
    expected = tokenizer(texts, max_seq_length=8)["input_word_ids"].numpy()
    dataset = tf.data.Dataset.from_tensor_slices(texts)
    batched = dataset.batch(2).map(lambda t: tokenizer(t, max_seq_length=8)["input_word_ids"])
    np.testing.assert_array_equal(np.concatenate(list(batched.as_numpy_iterator())), expected)
    single = dataset.map(lambda t: tokenizer(t, max_seq_length=8)["input_word_ids"])
    np.testing.assert_array_equal(np.stack(list(single.as_numpy_iterator())), expected)


def test_runs_inside_tf_function(tokenizer):
    texts = tf.constant(["hello, world", "ß ж"])
    expected = tokenizer(texts, max_seq_length=8)
    compiled = tf.function(lambda t: tokenizer(t, texts, max_seq_length=8))
    for name, tensor in tokenizer(texts, texts, max_seq_length=8).items():
        np.testing.assert_array_equal(compiled(texts)[name], tensor, err_msg=name)
    assert expected["input_word_ids"].shape == (2, 8)


class _Serving(tf.Module):
    def __init__(self, tokenizer: BertTokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, texts):
        return self.tokenizer(texts, max_seq_length=16)


def test_saved_model_keeps_the_vocabulary(tokenizer, vocab_file, tmp_path):
    texts = tf.constant(["Hello, WORLD!", "unaffable café 中文", "[MASK] " + "ж" * 60, ""])
    expected = tokenizer(texts, max_seq_length=16)
    tf.saved_model.save(_Serving(tokenizer), str(tmp_path / "served"))
    vocab_file.unlink()  # the SavedModel must not need it
    restored = tf.saved_model.load(str(tmp_path / "served"))
    for name, tensor in restored.serve(texts).items():
        np.testing.assert_array_equal(tensor, expected[name], err_msg=name)


def test_vocab_file_follows_hf_load_vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\r\n[UNK]\n[CLS]\n[SEP]\nword \nhello\nhello\n")
    tokenizer = BertTokenizer(path)
    assert tokenizer.vocab_size == 7
    assert tokenizer.token_to_id("hello") == 6  # a repeated token keeps its last line
    assert tokenizer.token_to_id("[PAD]") == 0  # only the line break is stripped
    assert tokenizer.id_to_token(4) == "word "
    assert tokenize(tokenizer, "hello") == [6]
    with pytest.raises(InputFormatError):
        tokenizer.token_to_id("absent")
    with pytest.raises(InputFormatError):
        tokenizer.id_to_token(7)


def test_special_token_ids(tokenizer):
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id) == (0, 1, 2, 3)


def test_vocabulary_without_the_special_tokens_is_rejected():
    with pytest.raises(InputFormatError, match="unk_token"):
        BertTokenizer(["<pad>", "[CLS]", "[SEP]", "hello"], pad_token="<pad>")


def test_from_pretrained_dir_reads_tokenizer_config(vocab_file):
    config = {"do_lower_case": False, "unk_token": {"content": "[UNK]", "__type": "AddedToken"}}
    (vocab_file.parent / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = BertTokenizer.from_pretrained_dir(vocab_file.parent)
    assert tokenizer.config == TokenizerConfig(lower_case=False)
    assert tokenize(tokenizer, "Hello") == ids("Hello")
    lowered = BertTokenizer.from_pretrained_dir(vocab_file.parent, lower_case=True)
    assert tokenize(lowered, "Hello") == ids("hello")


def test_from_pretrained_dir_without_vocab_says_so(tmp_path):
    with pytest.raises(CheckpointError, match="vocab.txt"):
        BertTokenizer.from_pretrained_dir(tmp_path)


def test_config_rebuilds_the_same_tokenizer(vocab_file):
    tokenizer = BertTokenizer(vocab_file, lower_case=False, max_chars_per_word=50)
    rebuilt = BertTokenizer(VOCAB, **dataclasses.asdict(tokenizer.config))
    text = ["Hello café, unaffable ΣΊΣ " + "a" * 60]
    assert rebuilt.tokenize(text).to_list() == tokenizer.tokenize(text).to_list()


def test_the_vocabulary_is_not_tracked_entry_by_entry():
    # A tf.Module wraps every list and dict it holds in a tracking wrapper, entry by entry:
    # ~1 s for a 30k-token vocabulary on each load. Only the lookup table needs tracking.
    vocab = [*VOCAB, *(f"token{i}" for i in range(1000))]
    tokenizer = BertTokenizer(vocab)
    held = vars(tokenizer).items()
    sizes = {name: len(v) for name, v in held if hasattr(v, "__len__") and not isinstance(v, str)}
    assert max(sizes.values()) < 100, sizes
    assert tokenizer.vocab_size == len(vocab)
    assert tokenizer.token_to_id("token999") == len(vocab) - 1
