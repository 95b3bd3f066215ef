"""Tokenizer files as users hand them over, broken or odd: each loads right (saying so when it
uses another file than the first one looked for) or ends in a `CheckpointError` naming the
file, never a TensorFlow or Python traceback. Files made by transformers, tokenizers and
sentencepiece themselves."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import tensorflow as tf

from bertfit.errors import CheckpointError
from bertfit.text import sentencepiece
from bertfit.text.loading import load_tokenizer
from bertfit.text.sentencepiece import parse_model_proto
from tests.text.sentencepiece_files import write_family

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

WORDS = "the quick brown fox jumps over a lazy dog while films are great dull and fun".split()
TEXTS = ["The quick fox, jumps!", "a café that is ``great'' ", "dull\tfilms  fun", ""]


@pytest.fixture(scope="module")
def albert(tmp_path_factory):
    """ALBERT's spiece.model (with sentencepiece's nmt_nfkc charsmap) bare, and as
    transformers 5 saves it (tokenizer.json)."""
    folder = tmp_path_factory.mktemp("albert")
    corpus = folder / "corpus.txt"
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(9)) for i in range(200)]
    corpus.write_text("\n".join(lines + ["Ünïcödé ﾃﾞｰﾀ e\u0301"]), "utf-8")
    return write_family(folder, "albert", corpus, 48)


@pytest.mark.slow  # transformers' tokenizer classes: 2-3 s
def test_a_tokenizer_json_of_only_special_tokens_uses_the_model_file_beside_it(albert, tmp_path):
    model_dir, _ = albert
    transformers.AlbertTokenizer(vocab_file=str(model_dir / "spiece.model")).save_pretrained(
        tmp_path
    )
    vocab = json.loads((tmp_path / "tokenizer.json").read_text("utf-8"))["model"]["vocab"]
    assert [piece for piece, _ in vocab] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    with pytest.raises(CheckpointError, match="tokenizer.json: the vocabulary holds only its 5"):
        load_tokenizer(tmp_path)  # alone: nothing to tokenize with, said of the file
    shutil.copy(model_dir / "spiece.model", tmp_path)
    with pytest.warns(UserWarning, match=r"tokenizer.json holds only the special.*spiece.model"):
        tokenizer = load_tokenizer(tmp_path, model_type="albert")
    expected = load_tokenizer(model_dir)
    assert tokenizer.tokenize(TEXTS).to_list() == expected.tokenize(TEXTS).to_list()
    assert tokenizer.special_ids == expected.special_ids


def test_a_unigram_piece_listed_twice_is_refused_naming_file_and_piece(albert, tmp_path):
    _, json_dir = albert
    shutil.copytree(json_dir, tmp_path, dirs_exist_ok=True)
    spec = json.loads((tmp_path / "tokenizer.json").read_text("utf-8"))
    spec["model"]["vocab"][40] = ["[SEP]", 0.0]
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), "utf-8")
    with pytest.raises(CheckpointError, match=r"tokenizer.json: the piece '\[SEP\]' is listed tw"):
        load_tokenizer(tmp_path)


def _write_damaged(model_dir, tmp_path, damage) -> None:
    data = bytearray((model_dir / "spiece.model").read_bytes())
    damage(data)
    (tmp_path / "spiece.model").write_bytes(bytes(data))
    (tmp_path / "config.json").write_text('{"model_type": "albert"}')


def _charsmap_at(data: bytes) -> int:
    charsmap = parse_model_proto(bytes(data)).normalizer_spec.precompiled_charsmap
    return bytes(data).index(charsmap)


def _trie_size_past_the_end(data: bytearray) -> None:
    at = _charsmap_at(data)
    data[at : at + 4] = (len(data) * 2).to_bytes(4, "little")


def _trie_node_out_of_range(data: bytearray) -> None:
    at = _charsmap_at(data) + 4
    data[at : at + 4] = (0xFFFFFC00).to_bytes(4, "little")  # the root's children: past the end


def _piece_not_utf8(data: bytearray) -> None:
    at = bytes(data).index(b"\xe2\x96\x81the")  # "▁the"
    data[at + 1] = 0xFF


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda data: data.__delitem__(slice(len(data) // 2, None)), "truncated or damaged"),
        (_piece_not_utf8, "a piece is not UTF-8"),
        (_trie_size_past_the_end, "trie size field says"),
        (_trie_node_out_of_range, "points past the end of the trie"),
        (lambda data: data.__setitem__(slice(0, 3), b"PK\x03"), "not a sentencepiece model"),
    ],
    ids=["truncated", "piece-not-utf8", "trie-size", "trie-node", "zip-bytes"],
)
def test_a_damaged_sentencepiece_model_is_refused_naming_the_file(albert, tmp_path, damage, says):
    _write_damaged(albert[0], tmp_path, damage)
    with pytest.raises(CheckpointError, match=f"spiece.model: .*{says}") as error:
        load_tokenizer(tmp_path)
    assert "Traceback" not in str(error.value)


def test_a_sentencepiece_model_with_byte_fallback_is_refused_not_tokenized_differently(
    albert, tmp_path
):
    model = parse_model_proto((albert[0] / "spiece.model").read_bytes())
    model.trainer_spec.byte_fallback = True  # sentencepiece would give byte pieces, not <unk>
    (tmp_path / "spiece.model").write_bytes(model.SerializeToString())
    (tmp_path / "config.json").write_text('{"model_type": "albert"}')
    with pytest.raises(CheckpointError, match=r"spiece.model is a sentencepiece model with byte_f"):
        load_tokenizer(tmp_path)


@pytest.mark.slow  # transformers' tokenizer classes: 2-3 s
def test_roberta_vocab_json_and_merges_with_a_full_tokenizer_config_load_like_hf(tmp_path):
    from tests.families import train_tokenizer

    trained = train_tokenizer("bpe", [" ".join(WORDS)] * 20, style="<s>")
    trained.backend_tokenizer.model.save(str(tmp_path))  # vocab.json + merges.txt
    config = {"tokenizer_class": "RobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
              "cls_token": "<s>", "sep_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
              "mask_token": "<mask>", "add_prefix_space": False}  # fmt: skip
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)  # RobertaTokenizer
    tokenizer = load_tokenizer(tmp_path)
    texts = ["the quick fox", "dull films, fun!<s>", " a lazy dog ", "Ünï  x"]
    assert (
        tokenizer.tokenize(texts).to_list()
        == hf_tokenizer(texts, add_special_tokens=False)["input_ids"]
    )
    assert tokenizer.special_ids["cls_id"] == hf_tokenizer.cls_token_id
    assert tokenizer.special_ids["pad_id"] == hf_tokenizer.pad_token_id

    (tmp_path / "vocab.json").write_text('["<s>", "<pad>"]', "utf-8")
    with pytest.raises(CheckpointError, match="vocab.json: expected a JSON object"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.json").write_text('{"<s>": "zero"}', "utf-8")
    with pytest.raises(CheckpointError, match="vocab.json: expected a JSON object of token to"):
        load_tokenizer(tmp_path)


def test_the_charsmap_normalizes_long_texts_in_linear_time_and_unchanged(albert):
    """The op copies a run of normalized characters once per character: quadratic, 15 s for
    500 KB of text and 95 s for 1 MB on a 2-core CPU. In chunks cut where no charsmap rule
    spans, 0.65 s and 1.4 s, normalized exactly as the op does the whole text."""
    tokenizer = load_tokenizer(albert[0])
    # A rule spans "e" + U+0301 (to "é") and "ﾃ" + "ﾞ" (to "デ"): cuts never fall inside.
    unit = "Ünïcödé ``text'' ﾃﾞｰﾀ e\u0301 x\u0301\u0301 中文没有空格\u3000 "
    texts = [unit * 700, "e" + "\u0301" * 200, "\u0301abc", ""]
    chunked = sentencepiece._apply_charsmap(
        tf.constant(texts), tokenizer._charsmap, tokenizer._joining
    )
    pieces, splits = sentencepiece._sentencepiece.sentencepiece_tokenize_op(
        tokenizer._charsmap.resource_handle, tf.constant(texts), 0, 1.0, False, False, False,
        tf.string, return_nbest=False,
    )  # fmt: skip
    whole = tf.strings.reduce_join(tf.RaggedTensor.from_row_splits(pieces, splits), axis=1)
    assert chunked.numpy().tolist() == whole.numpy().tolist()

    long_text = (unit * (1_200_000 // len(unit.encode()) + 1))[:800_000]  # ~1.2 MB of UTF-8
    tokenizer.tokenize([long_text[:100]])  # traced
    started = time.perf_counter()
    ids = tokenizer.tokenize([long_text])
    assert time.perf_counter() - started < 4.0  # 0.7 s here; the quadratic op: 28 s
    assert ids.row_lengths().numpy()[0] > 200_000
