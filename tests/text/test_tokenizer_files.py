"""Id-for-id parity with transformers 5's fast tokenizers for the files each family ships:
sentencepiece models (ALBERT, XLM-R, DeBERTa-v2/v3) trained on Rotten Tomatoes, bare and as
`tokenizer.json`, and MiniLM's real `tokenizer.json` without its vocab.txt."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertfit.data.rotten_tomatoes import SPLITS, load_rotten_tomatoes
from bertfit.text.loading import load_tokenizer, tokenizer_kind
from tests.text.sentencepiece_files import FAMILIES, write_family
from tests.text.test_tokenizer_parity import NASTY

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

# Two segmentations with equal scores ("zz zz zz zz z" and "z zz zz zz zz"): the tensorflow-text
# op and HF's Viterbi break the tie differently. The only RT text that differs, in every family.
TIES = [
    "You see Robin Williams and psycho killer, and you think, hmmmmm. "
    "You see the movie and you think, zzzzzzzzz."
]
SPECIALS = ["<s>a</s> <pad><unk> <mask> x", "  <mask>  ", "[MASK]x[SEP]", "\u2581 \u2581\u2581a"]


@pytest.fixture(scope="module")
def texts(rotten_tomatoes):
    return [text for split in SPLITS for text, _ in load_rotten_tomatoes(split)]


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory, texts):
    folder = tmp_path_factory.mktemp("families")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(texts), "utf-8")
    return {family: write_family(folder, family, corpus, 4000) for family in FAMILIES}


@pytest.fixture(scope="module", params=[(f, form) for f in FAMILIES for form in (0, 1)],
                ids=lambda p: f"{p[0]}-{'tokenizer.json' if p[1] else 'model-file'}")  # fmt: skip
def pair(request, family_dirs):
    family, form = request.param
    folder = family_dirs[family][form]
    return transformers.AutoTokenizer.from_pretrained(folder), load_tokenizer(folder)


def test_every_rotten_tomatoes_text_matches_hf_but_one_tie(pair, texts):
    hf_tokenizer, tokenizer = pair
    ours = tokenizer.tokenize(texts).to_list()
    theirs = hf_tokenizer(texts, add_special_tokens=False)["input_ids"]
    differ = [text for text, a, b in zip(texts, ours, theirs, strict=True) if a != b]
    assert differ == TIES
    kept = [text for text in texts if text not in TIES]
    assert_same_inputs(hf_tokenizer, tokenizer, kept, max_length=128)


@pytest.mark.parametrize("max_length", [32, 128])
def test_text_pairs_match_hf(pair, texts, max_length):
    hf_tokenizer, tokenizer = pair
    texts = [text for text in texts if text not in TIES]
    by_length = sorted(texts, key=len, reverse=True)
    first = by_length[:200] + texts[:300]
    second = by_length[:200][::-1] + texts[300:600]
    assert_same_inputs(hf_tokenizer, tokenizer, first, second, max_length)


def test_hostile_strings_match_hf(pair):
    hf_tokenizer, tokenizer = pair
    sample = NASTY + SPECIALS
    expected = hf_tokenizer(sample, add_special_tokens=False)["input_ids"]
    assert tokenizer.tokenize(sample).to_list() == expected
    assert_same_inputs(hf_tokenizer, tokenizer, sample, sample[::-1], max_length=24)


def test_special_ids_follow_the_family_template(family_dirs):
    for family, folders in family_dirs.items():
        for folder in folders:
            assert tokenizer_kind(folder) == "sentencepiece"
            ids = load_tokenizer(folder).special_ids
            hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
            assert ids["cls_id"] == hf_tokenizer.cls_token_id
            assert ids["sep_id"] == hf_tokenizer.sep_token_id
            assert ids["pad_id"] == hf_tokenizer.pad_token_id
            assert ids["pair_separators"] == (2 if family == "xlm-roberta" else 1)


@pytest.mark.parametrize("lowercase", [True, False])
def test_wordpiece_tokenizer_json_alone_matches_hf(minilm_dir, tmp_path, texts, lowercase):
    """What transformers 5 saves for BERT: tokenizer.json (here MiniLM's real one), no vocab.txt."""
    spec = json.loads(Path(minilm_dir, "tokenizer.json").read_text("utf-8"))
    spec["normalizer"]["lowercase"] = lowercase
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), "utf-8")
    shutil.copy(f"{minilm_dir}/tokenizer_config.json", tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text("utf-8"))
    config["do_lower_case"] = lowercase
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    assert tokenizer_kind(tmp_path) == tokenizer.kind == "wordpiece"
    assert_same_inputs(hf_tokenizer, tokenizer, texts)
    assert_same_inputs(hf_tokenizer, tokenizer, NASTY, NASTY[::-1], max_length=32)


def assert_same_inputs(hf_tokenizer, tokenizer, texts, pairs=None, max_length=128):
    """Packed inputs (in the graph, or on the host) equal HF's, type ids too."""
    ours = tokenizer(texts, pairs, max_seq_length=max_length)
    theirs = hf_tokenizer(
        texts, pairs, max_length=max_length, truncation=True, padding="max_length",
        return_tensors="np", return_token_type_ids=True,
    )  # fmt: skip
    names = [("input_word_ids", "input_ids"), ("input_mask", "attention_mask")]
    names += [("input_type_ids", "token_type_ids")]
    for ours_name, theirs_name in names:
        differs = np.flatnonzero((np.asarray(ours[ours_name]) != theirs[theirs_name]).any(axis=1))
        examples = [(texts[i], None if pairs is None else pairs[i]) for i in differs[:3]]
        assert differs.size == 0, f"{ours_name}: {differs.size} rows differ, e.g. {examples!r}"
