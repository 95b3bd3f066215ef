"""ByteFallbackBPETokenizer: mmBERT's kind of tokenizer (Gemma's SentencePiece-style BPE with
byte fallback) gives transformers' ids in the graph, and the host tokenizer gives the same; the
variants transformers 5's GemmaTokenizer and Llama 2 write; what it refuses."""

from __future__ import annotations

import json

import pytest

from bertfit.errors import CheckpointError
from bertfit.text.bpe import ByteLevelBPETokenizer
from bertfit.text.byte_fallback import ByteFallbackBPETokenizer
from bertfit.text.host import load_host_tokenizer
from bertfit.text.loading import load_tokenizer
from tests.families import byte_fallback_bpe
from tests.text.test_bpe import HOSTILE, assert_same_ids
from tests.text.test_tokenizer_files import assert_same_inputs

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def rotten(rotten_tomatoes, tmp_path_factory):
    """mmBERT's kind of tokenizer trained on Rotten Tomatoes' training texts, saved by
    transformers 5; 500 other texts (dev and test: accents, dashes, digits) and hostile ones."""
    from bertfit.data.rotten_tomatoes import load_rotten_tomatoes

    folder = tmp_path_factory.mktemp("mmbert")
    training = [text for text, _ in load_rotten_tomatoes("train")][:3000]
    byte_fallback_bpe(training, vocab_size=1000).save_pretrained(folder)
    others = [text for split in ("dev", "test") for text, _ in load_rotten_tomatoes(split)]
    return folder, [text for text in others if not text.isascii()][:100] + others[:400]


@pytest.mark.slow  # trains on 3,000 Rotten Tomatoes texts; 1,000 texts through the graph
def test_rotten_tomatoes_texts_give_transformers_ids_in_the_graph_and_on_the_host(rotten):
    folder, texts = rotten
    assert len(texts) == 500
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    in_graph, host = load_tokenizer(folder), load_host_tokenizer(folder)
    assert isinstance(in_graph, ByteFallbackBPETokenizer) and in_graph.kind == "bpe"
    expected = theirs(texts + HOSTILE, add_special_tokens=False)["input_ids"]
    assert in_graph.tokenize(texts + HOSTILE).to_list() == expected
    assert host.tokenize(texts + HOSTILE) == expected
    assert any(in_graph.id_to_token(i).startswith("<0x") for i in sum(expected[:100], []))
    first, second = texts[:100], texts[:-101:-1]  # the merge loop is most of the time
    for tokenizer in (in_graph, host):
        assert_same_inputs(theirs, tokenizer, texts[100:300], max_length=64)
        assert_same_inputs(theirs, tokenizer, first, second, max_length=32)
        assert_same_inputs(theirs, tokenizer, first, second, max_length=7)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """A small tokenizer.json of mmBERT's kind, trained on the hostile strings."""
    folder = tmp_path_factory.mktemp("small")
    byte_fallback_bpe(HOSTILE * 3, vocab_size=200).save_pretrained(folder)
    return json.loads((folder / "tokenizer.json").read_text())


def _fast(spec: dict):
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer.from_str(json.dumps(spec))
    )


def _gemma5(spec: dict) -> None:
    """As transformers 5's GemmaTokenizer saves it: a Split on spaces that splits nothing."""
    spec["pre_tokenizer"] = {"type": "Split", "pattern": {"String": " "},
                             "behavior": "MergedWithPrevious", "invert": False}  # fmt: skip


def _llama2(spec: dict) -> None:
    """Llama 2's: a "▁" before each piece of text, then spaces as "▁"."""
    prepend = {"type": "Prepend", "prepend": "\u2581"}
    spec["normalizer"] = {"type": "Sequence", "normalizers": [prepend, spec["normalizer"]]}


def _without_byte_pieces(spec: dict, **model) -> None:
    """No byte pieces (and no merges): unknown characters are the unknown token."""
    vocab = {t: i for t, i in spec["model"]["vocab"].items() if not t.startswith("<0x")}
    spec["model"].update(vocab=vocab, merges=[], **model)


def _added_with_a_space(spec: dict) -> None:
    """An added token found in the normalized text, where its space is "▁"."""
    token = {"id": len(spec["model"]["vocab"]), "content": "a b", "single_word": False,
             "lstrip": False, "rstrip": False, "normalized": True, "special": False}  # fmt: skip
    spec["added_tokens"].append(token)


VARIANTS = {
    "mmbert": lambda spec: None,
    "gemma5": _gemma5,
    "llama2": _llama2,
    "normalized_added": _added_with_a_space,
    "ignore_merges": lambda s: s["model"].update(ignore_merges=True),
    "unknown_fused": _without_byte_pieces,
    "unknown_each": lambda s: _without_byte_pieces(s, fuse_unk=False),
    "unknown_dropped": lambda s: _without_byte_pieces(s, unk_token=None, byte_fallback=False),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_gives_the_ids_of_its_tokenizer_json(spec, variant):
    spec = json.loads(json.dumps(spec))
    VARIANTS[variant](spec)
    ours = ByteFallbackBPETokenizer.from_tokenizer_json(spec)
    texts = HOSTILE + ["a b", " a b a b ", "x a bc", "\u2581a"]
    assert_same_ids(_fast(spec), ours, texts)
    assert_same_ids(_fast(ours.to_tokenizer_json()), ours, texts)  # what a run saves


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.update(normalizer={"type": "NFKC"}), "Replace"),
        (lambda s: s.update(normalizer=None), "Replace"),
        (lambda s: s.update(pre_tokenizer={"type": "Whitespace"}), "ByteLevel pre-tokenizer"),
        (lambda s: s.update(pre_tokenizer={"type": "ByteLevel"}), "byte_fallback=true beside"),
        (lambda s: s["model"].update(dropout=0.1), "dropout"),
    ],
)
def test_what_it_does_not_rebuild_is_refused(spec, change, message):
    spec = json.loads(json.dumps(spec))
    change(spec)
    with pytest.raises(CheckpointError, match=message):
        ByteFallbackBPETokenizer.from_tokenizer_json(spec)


def test_each_class_refuses_the_others_kind_and_points_to_load_tokenizer(spec):
    with pytest.raises(CheckpointError, match="is SentencePiece-style.*load_tokenizer"):
        ByteLevelBPETokenizer.from_tokenizer_json(spec)
    byte_level = {**spec, "pre_tokenizer": {"type": "ByteLevel"}, "normalizer": None}
    byte_level["model"] = {**spec["model"], "byte_fallback": False}
    with pytest.raises(CheckpointError, match="is not SentencePiece-style"):
        ByteFallbackBPETokenizer.from_tokenizer_json(byte_level)


def test_a_saved_tokenizer_is_its_tokenizer_json_alone(spec, tmp_path):
    """A run saves only tokenizer.json: a vocab.json + merges.txt would read as byte-level."""
    ours = ByteFallbackBPETokenizer.from_tokenizer_json(spec)
    ours.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json"]
    assert load_tokenizer(tmp_path).tokenize(HOSTILE).to_list() == ours.tokenize(HOSTILE).to_list()
