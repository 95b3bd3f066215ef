"""The newer families' tokenizers, as their checkpoints ship them (trained by tests/families.py,
saved by transformers 5), give transformers' own ids in the graph and on the host: 500 texts,
pairs, truncation. And MPNet's WordPiece keeps its own special tokens and pair template in every
layout of files: tokenizer.json, vocab.txt beside it (as its checkpoints on the hub have them),
vocab.txt alone."""

from __future__ import annotations

import shutil

import pytest

from bertfit.checkpoints.load import build_host_tokenizer, build_tokenizer, read_checkpoint
from bertfit.text.host import load_host_tokenizer
from bertfit.text.loading import load_tokenizer
from tests.families import write_family_checkpoint
from tests.text.test_host_tokenizer import CORPUS, TRAINING, family_folders
from tests.text.test_tokenizer_files import assert_same_inputs

transformers = pytest.importorskip("transformers")

__all__ = ["family_folders"]  # the fixture, shared with the host's tests
# The host's 498 texts (toy sentences in five shapes, hostile strings) and two of special
# tokens written among words.
TEXTS = [*CORPUS, "<s>a</s> <pad><unk> <mask> x [UNK]", "  [MASK]x[SEP] <mask>  "]
# The families whose kind of tokenizer is not checked against transformers' on all of Rotten
# Tomatoes (test_tokenizer_parity.py, test_tokenizer_files.py, test_bpe.py): MPNet's WordPiece
# with RoBERTa's template, EuroBERT's byte-level BPE with Llama 3's split. GTE's checkpoints
# ship XLM-R's SentencePiece or BERT's WordPiece, NomicBERT's BERT's: kinds checked there.
FAMILIES = ("mpnet", "eurobert")


@pytest.mark.slow  # one in-graph tokenizer traced a folder: 1 to 3 s
@pytest.mark.parametrize("family", FAMILIES)
def test_every_kind_of_tokenizer_gives_transformers_ids(family, family_folders):
    folder = family_folders[family]
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    in_graph = load_tokenizer(folder)
    expected = theirs(TEXTS, add_special_tokens=False)["input_ids"]
    ids = in_graph.tokenize(TEXTS).to_list()
    differ = [text for text, a, b in zip(TEXTS, ids, expected, strict=True) if a != b]
    assert (len(TEXTS), differ) == (500, [])
    host = load_host_tokenizer(folder)
    assert host.tokenize(TEXTS) == expected
    pairs = TEXTS[::-1]
    for tokenizer in (in_graph, host):
        assert_same_inputs(theirs, tokenizer, TEXTS, max_length=64)
        assert_same_inputs(theirs, tokenizer, TEXTS, pairs, max_length=24)
        assert_same_inputs(theirs, tokenizer, TEXTS, pairs, max_length=7)


@pytest.fixture(scope="module")
def mpnet_checkpoint(tmp_path_factory):
    """A tiny MPNet checkpoint with its tokenizer.json and, beside it, its vocab.txt and
    tokenizer_config.json as MPNet's checkpoints on the hub have them."""
    folder = tmp_path_factory.mktemp("mpnet")
    tokenizer, _ = write_family_checkpoint("mpnet", folder, TRAINING)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab), "utf-8")
    return tokenizer, folder


@pytest.mark.slow  # three in-graph tokenizers traced
def test_mpnets_special_tokens_and_template_hold_in_every_layout(mpnet_checkpoint, tmp_path):
    theirs, folder = mpnet_checkpoint
    texts, pairs = TEXTS[-100:], TEXTS[:100]
    checkpoint = read_checkpoint(folder)
    assert checkpoint.vocab_file is not None  # vocab.txt is what the checkpoint reads first
    bare = tmp_path / "vocab-only"  # vocab.txt alone: the special tokens are MPNet's class's
    bare.mkdir()
    shutil.copy(folder / "vocab.txt", bare / "vocab.txt")
    shutil.copy(folder / "config.json", bare / "config.json")
    for tokenizer in (
        build_tokenizer(checkpoint),
        build_host_tokenizer(checkpoint),
        load_tokenizer(bare),
        load_host_tokenizer(bare),
    ):
        assert tokenizer.special_ids == {
            "cls_id": theirs.cls_token_id, "sep_id": theirs.sep_token_id,
            "pad_id": theirs.pad_token_id, "pair_separators": 2, "second_type_id": 0,
        }  # fmt: skip
        assert_same_inputs(theirs, tokenizer, texts, pairs, max_length=20)


@pytest.mark.slow  # an in-graph tokenizer traced, saved and traced again
def test_a_saved_mpnet_tokenizer_keeps_its_template(mpnet_checkpoint, tmp_path):
    """A run saves its WordPiece as vocab.txt + tokenizer_config.json: the pair template
    goes with them."""
    theirs, folder = mpnet_checkpoint
    load_tokenizer(folder).save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.special_ids["pair_separators"] == 2 and again.special_ids["second_type_id"] == 0
    assert_same_inputs(theirs, again, CORPUS[:50], CORPUS[50:100], max_length=20)


@pytest.mark.slow  # an in-graph tokenizer traced
def test_the_onnx_exports_tokenizer_json_packs_as_mpnet(mpnet_checkpoint):
    """`bertfit export --format onnx` writes the run's WordPiece as a tokenizer.json for the
    client: with MPNet's template, pairs and their truncation as transformers packs them."""
    import tokenizers

    from bertfit.export.onnx import tokenizer_file

    theirs, folder = mpnet_checkpoint
    texts, pairs = TEXTS[-60:], TEXTS[:60]
    spec = tokenizer_file(load_tokenizer(folder), max_seq_length=20).to_str()
    encoded = tokenizers.Tokenizer.from_str(spec).encode_batch(list(zip(texts, pairs, strict=True)))
    expected = theirs(texts, pairs, max_length=20, truncation=True, padding="longest")
    assert [e.ids for e in encoded] == expected["input_ids"]
    assert [e.attention_mask for e in encoded] == expected["attention_mask"]
    assert {type_id for e in encoded for type_id in e.type_ids} == {0}
