"""Id-for-id parity with Hugging Face's tokenizer for MiniLM-L6, on real and hostile text."""

from __future__ import annotations

import numpy as np
import pytest

from bertfit.data.rotten_tomatoes import SPLITS, load_rotten_tomatoes
from bertfit.text import BertTokenizer

pytestmark = pytest.mark.slow

NASTY = [
    "café", "naïve", "Ångström", "Straße STRASSE ẞ", "İstanbul", "ΣΊΣΥΦΟΣ Σίσυφος ΟΔΟΣ.",
    "emoji 😀🥰👍🏽 👨‍👩‍👧 🇫🇷", "中文字符测试", "日本語のひらがなとカタカナ", "한국어 텍스트",
    "مرحبا بالعالم", "a\x00b\x07c\x1bd", "zero\u200bwidth\u200djoin\ufeffbom",
    "non\u00a0breaking", "line\u2028sep\u2029para", "e\u0301 combining a\u0308 \u0301",
    "x" * 500, "ж" * 60, "é" * 100, "é" * 101, "", "   ", "\t\n\r", "!!!...???", "--==**~~",
    "https://example.com/path?q=1&r=2#frag", "user@example.org", "3.14159 1,000,000 42nd",
    "[MASK] token [SEP] in [CLS] text [UNK][PAD]", "[mask] [Sep]", "\x85nel\x0bvt\x0cff\x1cfs",
    "ǅ ǈ ﬁ Ⅻ ⓐ", "ＦＵＬＬ ｗｉｄｔｈ", "\ue000private", "soft\u00adhyphen", "İİİ", "ΑΣ ς",
    "\U0002b820\U0002b920", "it's a \"quoted\" — dash – (paren) [bracket] {brace}",
    "bad\ufffdreplacement", "tab\there", "mixed CASE WoRdS", "unaffable unbelievably",
]  # fmt: skip

NORMALIZER_SETTINGS = [
    {},
    {"do_lower_case": False},
    {"strip_accents": False},
    {"do_lower_case": False, "strip_accents": True},
]


@pytest.fixture(scope="module")
def hf_tokenizer(minilm_dir):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return BertTokenizer.from_pretrained_dir(minilm_dir)


@pytest.fixture(scope="module")
def texts(rotten_tomatoes):
    return [text for split in SPLITS for text, _ in load_rotten_tomatoes(split)]


def assert_same_inputs(hf_tokenizer, tokenizer, texts, pairs=None, max_length=128):
    ours = tokenizer(texts, pairs, max_seq_length=max_length)
    theirs = hf_tokenizer(
        texts,
        pairs,
        max_length=max_length,
        truncation=True,
        padding="max_length",
        return_tensors="np",
    )
    names = [("input_word_ids", "input_ids"), ("input_mask", "attention_mask")]
    names += [("input_type_ids", "token_type_ids")]
    for ours_name, theirs_name in names:
        differs = np.flatnonzero((ours[ours_name].numpy() != theirs[theirs_name]).any(axis=1))
        examples = [(texts[i], None if pairs is None else pairs[i]) for i in differs[:3]]
        assert differs.size == 0, f"{ours_name}: {differs.size} rows differ, e.g. {examples!r}"


def test_rotten_tomatoes_has_the_documented_splits(texts):
    assert len(texts) == 12_752
    assert [len(load_rotten_tomatoes(split)) for split in SPLITS] == [10_205, 1_264, 1_283]


def test_every_rotten_tomatoes_text_matches_hf(hf_tokenizer, tokenizer, texts):
    assert_same_inputs(hf_tokenizer, tokenizer, texts)


@pytest.mark.parametrize("max_length", [32, 128])
def test_text_pairs_match_hf(hf_tokenizer, tokenizer, texts, max_length):
    by_length = sorted(texts, key=len, reverse=True)
    longest = by_length[:200]  # both sides over half the budget
    first = longest + texts[:300] + longest[:100]
    second = longest[::-1] + texts[300:600] + by_length[-100:]
    assert_same_inputs(hf_tokenizer, tokenizer, first, second, max_length)


def test_truncation_arithmetic_matches_hf(hf_tokenizer, tokenizer):
    for max_length in [3, 4, 5, 6, 7, 8, 9, 16, 17]:
        lengths = [(a, b) for a in range(max_length + 4) for b in range(max_length + 4)]
        first = [" ".join(["good"] * a) for a, _ in lengths]
        second = [" ".join(["bad"] * b) for _, b in lengths]
        assert_same_inputs(hf_tokenizer, tokenizer, first, second, max_length)


@pytest.mark.parametrize("settings", NORMALIZER_SETTINGS, ids=lambda s: str(s) or "default")
def test_hostile_strings_match_hf(minilm_dir, settings):
    transformers = pytest.importorskip("transformers")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir, **settings)
    tokenizer = BertTokenizer.from_pretrained_dir(
        minilm_dir,
        lower_case=settings.get("do_lower_case"),
        strip_accents=settings.get("strip_accents"),
    )
    assert_same_inputs(hf_tokenizer, tokenizer, NASTY)
    assert_same_inputs(hf_tokenizer, tokenizer, NASTY, NASTY[::-1], max_length=24)


def test_tokenize_matches_hf_without_special_tokens(hf_tokenizer, tokenizer, texts):
    sample = texts[::50] + NASTY
    expected = hf_tokenizer(sample, add_special_tokens=False)["input_ids"]
    assert tokenizer.tokenize(sample).to_list() == expected
