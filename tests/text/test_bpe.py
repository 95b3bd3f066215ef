"""ByteLevelBPETokenizer: id-for-id parity with Hugging Face's fast tokenizers for byte-level BPE
(RoBERTa, a ModernBERT-style template, EuroBERT's Llama 3 split), trained here with the
`tokenizers` library."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from bertfit.errors import CheckpointError, InputFormatError
from bertfit.text.bpe import ByteLevelBPETokenizer, bytes_to_unicode
from bertfit.text.tokenizer_json import LLAMA3_SPLIT
from tests.text.test_tokenizer_parity import NASTY

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
MODERNBERT_SPECIALS = ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "[MASK]"]
MODERNBERT_ADDED = ["|||EMAIL_ADDRESS|||", "  ", "    ", "\t\t"]  # normalized, not special

HOSTILE = NASTY + [
    "don't It'S", "I'll we've they're I'd I'm 'tis DON'T", "  leading spaces", "trailing  ",
    "\n\n", "a  b", "a \n b", " \n\tx", "a\u00a0\u00a0b\u3000\u3000c", "x<mask>y",
    "a   <mask> b", "<s>", " <s> ", "good <mask>", "</s></s>", "<pad>x<unk>",
    "[CLS] a [MASK]  b [SEP]", "mail |||EMAIL_ADDRESS||| now", "four    spaces\t\ttabs",
    "\ufeffbom first", "e\u0301t\u00e9 \u212b A\u030a", "aaaa aaaaa bbbbbbbbbb", "1234567 3.14",
    "$$$ €€€ ... --- !!", "ｆｕｌｌ 🙂🙂🙂 x",
]  # fmt: skip

# A small corpus for the fast tests: every test here has text to train a few hundred merges on.
CORPUS = HOSTILE + [
    "a good film, a great film and a bad film.", "The film's story isn't good; it's great!",
    "Films like this one are rare: 10/10, would watch again.", "aaaa bbbb aaaa bbbb",
] * 3  # fmt: skip


def train(texts, vocab_size):
    """A byte-level BPE trained on `texts`: (vocab dict, merges as pairs)."""
    model = tokenizers.ByteLevelBPETokenizer()
    model.train_from_iterator(texts, vocab_size=vocab_size, special_tokens=ROBERTA_SPECIALS)
    spec = json.loads(model.to_str())
    merges = [
        tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["model"]["merges"]
    ]
    return spec["model"]["vocab"], merges, model


def roberta_dir(path, vocab, merges, model, add_prefix_space=False):
    """RoBERTa's files as transformers 5 saves them, plus the classic vocab.json/merges.txt."""
    mask = tokenizers.AddedToken(
        "<mask>", lstrip=True, rstrip=False, normalized=False, special=True
    )
    hf = transformers.RobertaTokenizerFast(
        vocab=vocab, merges=merges, mask_token=mask, add_prefix_space=add_prefix_space
    )
    hf.save_pretrained(str(path))
    model.save_model(str(path))  # vocab.json + merges.txt
    return path


def modernbert_dir(path, vocab, merges):
    """A ModernBERT-style tokenizer: NFC, [CLS] $A [SEP] $B:1 [SEP]:1, extra added tokens."""
    vocab = dict(vocab)
    for token in MODERNBERT_SPECIALS + MODERNBERT_ADDED:
        vocab.setdefault(token, len(vocab))
    model = tokenizers.models.BPE(vocab=vocab, merges=merges)
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.normalizer = tokenizers.normalizers.NFC()
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    specials = [
        tokenizers.AddedToken(t, normalized=False, special=True) for t in MODERNBERT_SPECIALS
    ]
    specials[-1] = tokenizers.AddedToken("[MASK]", lstrip=True, normalized=False, special=True)
    tokenizer.add_special_tokens(specials)
    tokenizer.add_tokens([tokenizers.AddedToken(t, normalized=True) for t in MODERNBERT_ADDED])
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
    )
    hf.save_pretrained(str(path))
    return path


def eurobert_dir(path, vocab, merges):
    """EuroBERT's kind of tokenizer: Llama 3's split, then bytes; merges ignored for whole
    words in the vocabulary; <|begin_of_text|> $A <|end_of_text|>."""
    vocab = dict(vocab)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|mask|>"]
    for token in specials:
        vocab.setdefault(token, len(vocab))
    tokenizer = tokenizers.Tokenizer(
        tokenizers.models.BPE(vocab=vocab, merges=merges, ignore_merges=True)
    )
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Split(
            tokenizers.Regex(LLAMA3_SPLIT), behavior="isolated"
        ),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    tokenizer.add_special_tokens([tokenizers.AddedToken(t, special=True) for t in specials])
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="<|begin_of_text|> $A <|end_of_text|>",
        pair="<|begin_of_text|> $A <|end_of_text|> $B:1 <|end_of_text|>:1",
        special_tokens=[(t, vocab[t]) for t in specials[:2]],
    )
    hf = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=specials[0],
        eos_token=specials[1],
        pad_token=specials[1],
        mask_token=specials[2],
    )
    hf.save_pretrained(str(path))
    return path


def build(tmp_path_factory, texts, vocab_size, llama3=False):
    vocab, merges, model = train(texts, vocab_size)
    folders = {
        "roberta": roberta_dir(tmp_path_factory.mktemp("roberta"), vocab, merges, model),
        "roberta_prefix": roberta_dir(
            tmp_path_factory.mktemp("roberta_prefix"), vocab, merges, model, add_prefix_space=True
        ),
        "modernbert": modernbert_dir(tmp_path_factory.mktemp("modernbert"), vocab, merges),
    }
    if llama3:
        folders["eurobert"] = eurobert_dir(tmp_path_factory.mktemp("eurobert"), vocab, merges)
    return {
        name: (
            transformers.AutoTokenizer.from_pretrained(str(folder)),
            ByteLevelBPETokenizer.from_pretrained_dir(folder),
            folder,
        )
        for name, folder in folders.items()
    }


VARIANTS = ["roberta", "roberta_prefix", "modernbert"]
# The fast tests' variants: EuroBERT's too (its ids on 500 texts: test_family_tokenizers.py).
SMALL_VARIANTS = [*VARIANTS, "eurobert"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The variants trained on `CORPUS` (400 ids): (HF tokenizer, ours, folder)."""
    return build(tmp_path_factory, CORPUS, 400, llama3=True)


@pytest.fixture(scope="module")
def texts(rotten_tomatoes):
    from bertfit.data.rotten_tomatoes import SPLITS, load_rotten_tomatoes

    return [text for split in SPLITS for text, _ in load_rotten_tomatoes(split)]


@pytest.fixture(scope="module")
def rt(tmp_path_factory, texts):
    """The three variants trained on all Rotten Tomatoes texts (6,000 ids)."""
    return build(tmp_path_factory, texts, 6000)


def assert_same_ids(hf_tokenizer, tokenizer, texts, pairs=None, max_length=None):
    """Same ids as HF: without special tokens if `max_length` is None, else packed."""
    if max_length is None:
        expected = hf_tokenizer(texts, add_special_tokens=False)["input_ids"]
        ours = tokenizer.tokenize(texts).to_list()
        differs = [i for i, (a, b) in enumerate(zip(ours, expected, strict=True)) if a != b]
        examples = [(texts[i], ours[i], expected[i]) for i in differs[:3]]
        assert not differs, f"{len(differs)} of {len(texts)} texts differ, e.g. {examples!r}"
        return
    ours = tokenizer(texts, pairs, max_seq_length=max_length)
    theirs = hf_tokenizer(
        texts,
        pairs,
        max_length=max_length,
        truncation=True,
        padding="max_length",
        return_token_type_ids=True,
        return_tensors="np",
    )
    names = [("input_word_ids", "input_ids"), ("input_mask", "attention_mask")]
    names += [("input_type_ids", "token_type_ids")]
    for ours_name, theirs_name in names:
        differs = np.flatnonzero((ours[ours_name].numpy() != theirs[theirs_name]).any(axis=1))
        examples = [(texts[i], None if pairs is None else pairs[i]) for i in differs[:3]]
        assert differs.size == 0, f"{ours_name}: {differs.size} rows differ, e.g. {examples!r}"


# ---- parity on hostile text (fast) ----------------------------------------------------------


@pytest.mark.parametrize("variant", SMALL_VARIANTS)
def test_hostile_strings_match_hf(small, variant):
    hf_tokenizer, tokenizer, _ = small[variant]
    assert_same_ids(hf_tokenizer, tokenizer, HOSTILE)
    assert_same_ids(hf_tokenizer, tokenizer, HOSTILE, max_length=16)
    assert_same_ids(hf_tokenizer, tokenizer, HOSTILE, HOSTILE[::-1], max_length=24)


@pytest.mark.parametrize("variant", SMALL_VARIANTS)
def test_single_strings_match_hf(small, variant):
    hf_tokenizer, tokenizer, _ = small[variant]
    for text in ["a good film", "", "  ", "<mask>", "[MASK]"]:
        expected = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.tokenize(text).numpy().tolist() == expected, text
        packed = hf_tokenizer(
            text, "its pair", max_length=12, truncation=True, padding="max_length"
        )
        ours = tokenizer(text, "its pair", max_seq_length=12)
        assert ours["input_word_ids"].numpy().tolist() == packed["input_ids"], text


def test_every_assigned_code_point_matches_hf(small):
    """Characters classify as HF's regex does: letters, numbers, marks, whitespace, symbols.
    (Code points newer than this Python's Unicode tables may differ; see the module docstring.)"""
    hf_tokenizer, tokenizer, _ = small["roberta"]
    probes = [
        f"x{c}{c} {c}9 {c}x{c}'s  {c}\n"
        for c in map(chr, range(0, 0x30000, 3))
        if unicodedata.category(c) not in ("Cn", "Cs")
    ]
    assert len(probes) > 40_000
    assert_same_ids(hf_tokenizer, tokenizer, probes)


def test_truncation_matches_hf(small):
    hf_tokenizer, tokenizer, _ = small["roberta"]
    for max_length in [4, 5, 6, 7, 9, 16]:
        lengths = [(a, b) for a in range(max_length + 2) for b in range(max_length + 2)]
        first = [" good" * a for a, _ in lengths]
        second = [" bad" * b for _, b in lengths]
        assert_same_ids(hf_tokenizer, tokenizer, first, second, max_length)


# ---- parity on Rotten Tomatoes (slow) -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_rotten_tomatoes_text_matches_hf(rt, texts, variant):
    hf_tokenizer, tokenizer, _ = rt[variant]
    assert len(texts) == 12_752
    assert_same_ids(hf_tokenizer, tokenizer, texts)
    assert_same_ids(hf_tokenizer, tokenizer, texts, max_length=128)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("max_length", [32, 128])
def test_rotten_tomatoes_pairs_match_hf(rt, texts, variant, max_length):
    hf_tokenizer, tokenizer, _ = rt[variant]
    by_length = sorted(texts, key=len, reverse=True)
    longest = by_length[:200]
    first = longest + texts[:1000] + longest[:100]
    second = longest[::-1] + texts[1000:2000] + by_length[-100:]
    assert_same_ids(hf_tokenizer, tokenizer, first, second, max_length)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_rotten_tomatoes_vocabulary_on_hostile_strings(rt, variant):
    hf_tokenizer, tokenizer, _ = rt[variant]
    assert_same_ids(hf_tokenizer, tokenizer, HOSTILE)
    assert_same_ids(hf_tokenizer, tokenizer, HOSTILE, HOSTILE[::-1], max_length=32)


@pytest.mark.slow
def test_classic_roberta_files_match_hf(rt, texts):
    hf_tokenizer, _, folder = rt["roberta"]
    tokenizer = ByteLevelBPETokenizer.from_files(folder / "vocab.json", folder / "merges.txt")
    assert_same_ids(hf_tokenizer, tokenizer, texts[::10] + HOSTILE)
    assert_same_ids(hf_tokenizer, tokenizer, texts[:500], texts[500:1000], max_length=64)


# ---- the template and the special tokens ----------------------------------------------------


def test_special_ids_follow_the_post_processor(small):
    roberta, modernbert = small["roberta"][1], small["modernbert"][1]
    ids = roberta.special_ids
    assert ids == {
        "cls_id": roberta.token_to_id("<s>"),
        "sep_id": roberta.token_to_id("</s>"),
        "pad_id": roberta.token_to_id("<pad>"),
        "pair_separators": 2,
        "second_type_id": 0,
    }
    assert modernbert.special_ids["pair_separators"] == 1
    assert modernbert.special_ids["second_type_id"] == 1
    assert modernbert.id_to_token(modernbert.cls_id) == "[CLS]"
    assert modernbert.id_to_token(modernbert.pad_id) == "[PAD]"
    assert roberta.kind == "bpe"
    assert roberta.unk_id == roberta.token_to_id("<unk>")
    assert roberta.vocab_size == 400


def test_tokens_use_the_byte_alphabet(small):
    tokenizer = small["roberta"][1]
    alphabet = bytes_to_unicode()
    assert alphabet[ord(" ")] == "Ġ" and len(set(alphabet.values())) == 256
    pieces = [tokenizer.id_to_token(i) for i in tokenizer.tokenize("a good film").numpy()]
    assert "".join(pieces) == "aĠgoodĠfilm"
    with pytest.raises(InputFormatError):
        tokenizer.token_to_id("not a token")
    with pytest.raises(InputFormatError):
        tokenizer.id_to_token(10**6)


def test_inputs_are_validated(small):
    tokenizer = small["roberta"][1]
    with pytest.raises(InputFormatError):
        tokenizer.tokenize([1, 2])
    with pytest.raises(InputFormatError):
        tokenizer.tokenize(tf.constant([[b"a"]]))
    single = tokenizer.tokenize("a good film")
    assert isinstance(single, tf.Tensor) and single.dtype == tf.int32
    batch = tokenizer.tokenize(np.array(["a good film", ""]))
    assert isinstance(batch, tf.RaggedTensor) and batch.to_list()[0] == single.numpy().tolist()
    assert batch.to_list()[1] == []


# ---- in the graph -----------------------------------------------------------------------------


def test_runs_in_tf_data_and_tf_function(small):
    tokenizer = small["modernbert"][1]
    texts = HOSTILE[:12]
    expected = tokenizer(texts, max_seq_length=16)["input_word_ids"].numpy()
    dataset = tf.data.Dataset.from_tensor_slices(texts)
    batched = dataset.batch(5).map(lambda t: tokenizer(t, max_seq_length=16)["input_word_ids"])
    np.testing.assert_array_equal(np.concatenate(list(batched.as_numpy_iterator())), expected)
    single = dataset.map(lambda t: tokenizer(t, max_seq_length=16)["input_word_ids"])
    np.testing.assert_array_equal(np.stack(list(single.as_numpy_iterator())), expected)
    compiled = tf.function(lambda t: tokenizer.tokenize(t))
    assert compiled(tf.constant(texts)).to_list() == tokenizer.tokenize(texts).to_list()


class _Serving(tf.Module):
    def __init__(self, tokenizer: ByteLevelBPETokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, texts):
        return self.tokenizer(texts, texts, max_seq_length=24)


@pytest.mark.parametrize("variant", ["roberta", "modernbert"])
def test_saved_model_needs_no_files(small, tmp_path, variant):
    tokenizer = small[variant][1]
    texts = tf.constant(HOSTILE)
    expected = tokenizer(texts, texts, max_seq_length=24)
    tf.saved_model.save(_Serving(tokenizer), str(tmp_path / "served"))
    restored = tf.saved_model.load(str(tmp_path / "served"))
    for name, tensor in restored.serve(texts).items():
        np.testing.assert_array_equal(tensor, expected[name], err_msg=name)


def test_saved_model_loads_in_plain_tensorflow(small, tmp_path):
    """Without NFC the graph has only core TensorFlow ops: a process that imports neither
    bertfit nor tensorflow_text loads and runs it."""
    tokenizer = small["roberta"][1]
    tf.saved_model.save(_Serving(tokenizer), str(tmp_path / "served"))
    expected = tokenizer(HOSTILE, HOSTILE, max_seq_length=24)["input_word_ids"].numpy()
    script = (
        "import json, sys; import tensorflow as tf\n"
        "served = tf.saved_model.load(sys.argv[1])\n"
        "texts = tf.constant(json.loads(sys.argv[2]))\n"
        "print(json.dumps(served.serve(texts)['input_word_ids'].numpy().tolist()))\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "served"), json.dumps(HOSTILE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected.tolist()


# ---- saving and loading -----------------------------------------------------------------------


def same_config(a, b) -> bool:
    def by_id(config):
        return dataclasses.replace(config, added_tokens=sorted(config.added_tokens, key=str))

    return by_id(a) == by_id(b)


@pytest.mark.parametrize("variant", VARIANTS)
def test_save_round_trips(small, tmp_path, variant):
    hf_tokenizer, tokenizer, _ = small[variant]
    folder = tokenizer.save(tmp_path / "saved")
    assert {p.name for p in folder.iterdir()} >= {"vocab.json", "merges.txt", "tokenizer.json"}
    reloaded = [
        ByteLevelBPETokenizer.from_pretrained_dir(folder),
        ByteLevelBPETokenizer.from_tokenizer_json(
            json.loads((folder / "tokenizer.json").read_text())
        ),
    ]
    if variant == "roberta":
        reloaded.append(
            ByteLevelBPETokenizer.from_files(folder / "vocab.json", folder / "merges.txt")
        )
    expected = tokenizer(HOSTILE, HOSTILE[::-1], max_seq_length=32)
    for other in reloaded:
        assert same_config(other.config, tokenizer.config)
        for name, tensor in other(HOSTILE, HOSTILE[::-1], max_seq_length=32).items():
            np.testing.assert_array_equal(tensor, expected[name], err_msg=name)
    # Hugging Face reads the saved tokenizer.json too, with the same ids.
    saved = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert [saved.encode(t, add_special_tokens=False).ids for t in HOSTILE] == hf_tokenizer(
        HOSTILE, add_special_tokens=False
    )["input_ids"]


def test_merges_as_strings_are_read_too(small):
    hf_tokenizer, _, folder = small["roberta"]
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["model"]["merges"] = [" ".join(pair) for pair in spec["model"]["merges"]]
    tokenizer = ByteLevelBPETokenizer.from_tokenizer_json(spec)
    assert_same_ids(hf_tokenizer, tokenizer, HOSTILE)


def _drop_bell_byte(spec, **model):
    bell = bytes_to_unicode()[7]  # "\x07" is in HOSTILE and in no merge of the small corpus
    assert not any(bell in "".join(pair) for pair in spec["model"]["merges"])
    del spec["model"]["vocab"][bell]
    spec["model"].update(model)


SPEC_CHANGES = {
    "ignore_merges": lambda s: s["model"].update(ignore_merges=True),
    "no_regex": lambda s: s["pre_tokenizer"].update(use_regex=False),
    "sequence": lambda s: s.update(
        pre_tokenizer={"type": "Sequence", "pretokenizers": [s["pre_tokenizer"]]}
    ),
    "unknown_byte_dropped": _drop_bell_byte,
    "unknown_byte_unk": lambda s: _drop_bell_byte(s, unk_token="<unk>"),
    "unknown_byte_fused": lambda s: _drop_bell_byte(s, unk_token="<unk>", fuse_unk=True),
}


@pytest.mark.parametrize("change", SPEC_CHANGES)
def test_other_bpe_settings_match_hf(small, change):
    spec = json.loads((small["roberta"][2] / "tokenizer.json").read_text())
    SPEC_CHANGES[change](spec)
    hf_tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer.from_str(json.dumps(spec))
    )
    texts = HOSTILE + ["\x07", "a\x07\x07\x07b \x07 x\x07"]
    assert_same_ids(hf_tokenizer, ByteLevelBPETokenizer.from_tokenizer_json(spec), texts)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["model"].update(type="WordPiece"), "BPE models only"),
        (lambda s: s["model"].update(dropout=0.1), "dropout"),
        (lambda s: s["model"].update(continuing_subword_prefix="##"), "continuing_subword_prefix"),
        (lambda s: s["model"].update(byte_fallback=True), "byte_fallback"),
        (lambda s: s.update(pre_tokenizer={"type": "Whitespace"}), "ByteLevel"),
        (lambda s: s.update(pre_tokenizer=split_then_bytes(r"\s+")), "Llama 3's Split"),
        (lambda s: s.update(pre_tokenizer=split_then_bytes(use_regex=True)), "Llama 3's Split"),
        (lambda s: s.update(normalizer={"type": "Lowercase"}), "Lowercase"),
        (lambda s: s["added_tokens"][0].update(single_word=True), "single_word"),
        (lambda s: s["model"]["merges"].append(["Ġ", "zzzz"]), "not in the vocabulary"),
        (lambda s: s.update(post_processor={"type": "Weird"}), "Weird"),
        (lambda s: s.update(post_processor=template("$A </s>", "$A </s> $B </s>")), "of the form"),
        (
            lambda s: s.update(post_processor=template("<s> $A </s>", "<s> $A $B </s>")),
            "of the form",
        ),
    ],
)
def test_unsupported_tokenizer_json_is_refused(small, change, message):
    spec = json.loads((small["roberta"][2] / "tokenizer.json").read_text())
    change(spec)
    with pytest.raises(CheckpointError, match=message):
        ByteLevelBPETokenizer.from_tokenizer_json(spec)


def split_then_bytes(pattern: str = LLAMA3_SPLIT, use_regex: bool = False) -> dict:
    """A `Split` pre-tokenizer of `pattern`, then a ByteLevel one (Llama 3's: as given)."""
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated"}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": use_regex}
    return {"type": "Sequence", "pretokenizers": [split, byte_level]}


def template(single: str, pair: str) -> dict:
    specials = [("<s>", 0), ("</s>", 2)]
    processor = tokenizers.processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=specials
    )
    return json.loads(processor.__getstate__())


def test_post_processors_give_the_pair_template(small):
    spec = json.loads((small["roberta"][2] / "tokenizer.json").read_text())
    settings = {
        "bert": {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]},
        "three": template("<s> $A </s>", "<s> $A </s> </s> </s> $B:1 </s>:1"),
        "sequence": {
            "type": "Sequence",
            "processors": [{"type": "ByteLevel"}, template("<s> $A </s>", "<s> $A </s> $B </s>")],
        },
    }
    found = {}
    for name, processor in settings.items():
        tokenizer = ByteLevelBPETokenizer.from_tokenizer_json({**spec, "post_processor": processor})
        ids = tokenizer.special_ids
        found[name] = (ids["cls_id"], ids["sep_id"], ids["pair_separators"], ids["second_type_id"])
    assert found == {"bert": (0, 2, 1, 1), "three": (0, 2, 3, 1), "sequence": (0, 2, 1, 0)}


def test_tokenizer_json_without_a_template_tokenizes_but_cannot_pack(small):
    hf_tokenizer, _, folder = small["roberta"]
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["post_processor"] = {"type": "ByteLevel", "trim_offsets": True}
    tokenizer = ByteLevelBPETokenizer.from_tokenizer_json(spec)
    assert_same_ids(hf_tokenizer, tokenizer, HOSTILE[:5])
    with pytest.raises(CheckpointError, match="template"):
        tokenizer("a good film")


def test_missing_files_are_explained(tmp_path):
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        ByteLevelBPETokenizer.from_pretrained_dir(tmp_path)
