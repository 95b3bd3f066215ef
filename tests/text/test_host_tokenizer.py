"""The host tokenizer (`bertfit.text.host`: `tokenizers` and NumPy, no TensorFlow) gives what the
in-graph tokenizer of the same files gives: ids, special ids, packed single texts and pairs
(truncated at small lengths), long-document windows; for every family's tokenizer, every layout
of tokenizer files a checkpoint ships, the casing overrides; and it runs where TensorFlow
cannot be imported."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import tensorflow as tf

from bertfit.checkpoints.load import build_host_tokenizer, build_tokenizer, read_checkpoint
from bertfit.errors import CheckpointError
from bertfit.text import host_packing
from bertfit.text.host import load_host_tokenizer
from bertfit.text.loading import load_tokenizer
from bertfit.text.packing import pack_inputs
from bertfit.text.windows import WindowSpec, window_ids
from tests.export.runtimes import assert_tokenizer_json_packs_as
from tests.families import TOKENIZER_KINDS, train_tokenizer
from tests.jax_process import run_in_jax
from tests.text import host_without_tensorflow as child
from tests.text.sentencepiece_files import write_model_file
from tests.text.test_tokenizer_parity import NASTY
from tests.tiny import sentiment_rows

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

TRAINING = [text for text, _ in sentiment_rows(60)]  # what tests/families.py trains on


def _corpus() -> list[str]:
    """500 texts: the families' toy sentences in five shapes (cased, spaced, accented, with
    special tokens written in them, long), then hostile strings."""
    rows = [text for text, _ in sentiment_rows(455, seed=1)]
    shapes = [
        lambda t: t,
        lambda t: t.upper() + "!",
        lambda t: "  " + t.title().replace(" ", " \t ") + " ",
        lambda t: f"{t} — café naïve 中文 [MASK] <mask> <s>x</s> [SEP]",
        lambda t: f"{t}, {t}; {t}? {t}.",
    ]
    return [shapes[i % 5](text) for i, text in enumerate(rows)] + NASTY


CORPUS = _corpus()
SPEC = WindowSpec(max_seq_length=12, stride=3, max_chunks=3)
# The families that ship each layout of files as their checkpoints do (tokenizer.json is what
# transformers 5 saves for all of them: the `family_folders`).
SENTENCEPIECE_FILES = ("albert", "xlm-roberta", "deberta-v2")


def assert_same_outputs(host, in_graph, texts=CORPUS, ids=None) -> None:
    """The host tokenizer's ids, special ids, packings and windows are the in-graph one's
    (`ids`: the in-graph tokenizer's of `texts`, when already made)."""
    ids = in_graph.tokenize(texts) if ids is None else ids
    assert host.tokenize(texts) == ids.to_list()
    assert (host.kind, host.vocab_size) == (in_graph.kind, in_graph.vocab_size)
    assert host.special_ids == in_graph.special_ids
    pairs = list(reversed(texts))
    pair_ids = tf.gather(ids, tf.range(len(texts) - 1, -1, -1))
    for kwargs in [
        {"max_seq_length": 32},
        {"max_seq_length": 64, "padding": "longest"},
        {"text_pairs": pairs, "max_seq_length": 24},
        {"text_pairs": pairs, "max_seq_length": 6},  # every pair truncated, both sides
    ]:
        second = pair_ids if "text_pairs" in kwargs else None
        length, padding = kwargs["max_seq_length"], kwargs.get("padding", "max_length")
        expected = in_graph.pack(ids, second, max_seq_length=length, padding=padding)
        got = host(texts, **kwargs)
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value.numpy(), err_msg=f"{name} {kwargs}")
    expected = window_ids(ids, SPEC, **in_graph.special_ids)
    got = host.windows(texts, SPEC)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value.numpy(), err_msg=name)


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory):
    """family → its tokenizer, trained as tests/families.py trains it and saved by
    transformers 5 (`tokenizer.json`); families whose checkpoints ship the same kind of
    tokenizer share one folder."""
    folders = {}
    for kind, style in sorted(set(TOKENIZER_KINDS.values())):
        folder = tmp_path_factory.mktemp(f"{kind}-{style.strip('[]<>')}")
        train_tokenizer(kind, TRAINING, style=style).save_pretrained(folder)
        folders[kind, style] = folder
    return {family: folders[kind] for family, kind in TOKENIZER_KINDS.items()}


@pytest.fixture(scope="module")
def in_graph_of():
    """folder → its in-graph tokenizer and the ids it gives `CORPUS`, made once (tracing the
    tokenizer is most of a parity test's time)."""

    @functools.cache
    def in_graph(folder):
        tokenizer = load_tokenizer(folder)
        return tokenizer, tokenizer.tokenize(CORPUS)

    return in_graph


@pytest.mark.slow  # one in-graph tokenizer traced a folder: 1 to 3 s
@pytest.mark.parametrize("family", TOKENIZER_KINDS)
def test_every_familys_tokenizer_gives_the_in_graph_ids_packings_and_windows(
    family, family_folders, in_graph_of
):
    folder = family_folders[family]
    in_graph, ids = in_graph_of(folder)
    assert_same_outputs(load_host_tokenizer(folder), in_graph, CORPUS, ids)


@pytest.mark.slow  # as above (with the same in-graph tokenizers)
@pytest.mark.parametrize("family", TOKENIZER_KINDS)
def test_an_in_graph_tokenizer_saved_packs_alike_in_the_host_tokenizers_tokenizer_json(
    family, family_folders, in_graph_of, tmp_path
):
    """What `bertfit export --format onnx` writes beside its model: the in-graph tokenizer
    saved (as a run holds it), read back by the host tokenizer, packing as `tokenizers`'s
    template, truncation and padding (`packing_tokenizer`)."""
    in_graph, _ = in_graph_of(family_folders[family])
    in_graph.save(tmp_path)
    packing = load_host_tokenizer(tmp_path).packing_tokenizer(24)
    assert_tokenizer_json_packs_as(packing, in_graph, 24, CORPUS[::5])


@pytest.fixture(scope="module")
def layouts(tmp_path_factory, family_folders):
    """The other layouts of tokenizer files: BERT's vocab.txt, each family's bare
    sentencepiece file (XLM-R's with fairseq's ids), RoBERTa's vocab.json + merges.txt."""
    root = tmp_path_factory.mktemp("layouts")
    (root / "corpus.txt").write_text("\n".join(CORPUS), "utf-8")
    found = {family: write_model_file(root, family, root / "corpus.txt", 200)
             for family in SENTENCEPIECE_FILES}  # fmt: skip
    train_tokenizer("wordpiece", TRAINING).backend_tokenizer.model.save(str(root))
    found["vocab.txt"] = root
    bpe = root / "bpe"
    bpe.mkdir()
    train_tokenizer("bpe", TRAINING, style="<s>").backend_tokenizer.model.save(str(bpe))
    (bpe / "tokenizer_config.json").write_text(json.dumps({"add_prefix_space": True}))
    found["vocab.json"] = bpe
    return found


# Where bertfit's in-graph SentencePiece tokenizer knowingly differs from Hugging Face's (see
# `bertfit.text.sentencepiece`), the host one gives Hugging Face's ids.
KNOWN_DIFFERENCES = {
    "x" * 500: "segmentations of equal score: the tensorflow-text op and HF break ties apart",
    "한국어 텍스트": "ALBERT's NFKD splits Hangul into jamo; the op's charsmap joins them again, "
    "HF's (a grapheme at a time) does not",
}


@pytest.mark.slow  # as above, and transformers' own tokenizer where the two differ
@pytest.mark.parametrize("layout", ["vocab.txt", *SENTENCEPIECE_FILES, "vocab.json"])
def test_every_layout_of_files_gives_the_in_graph_outputs(layout, layouts):
    folder = layouts[layout]
    host, in_graph = load_host_tokenizer(folder), load_tokenizer(folder)
    ids = in_graph.tokenize(CORPUS)
    pairs = zip(CORPUS, host.tokenize(CORPUS), ids.to_list(), strict=True)
    differ = [text for text, a, b in pairs if a != b]
    assert set(differ) <= set(KNOWN_DIFFERENCES)
    if differ:
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        assert host.tokenize(differ) == hf_tokenizer(differ, add_special_tokens=False)["input_ids"]
    same = [i for i, text in enumerate(CORPUS) if text not in differ]
    assert_same_outputs(host, in_graph, [CORPUS[i] for i in same], tf.gather(ids, same))


@pytest.mark.parametrize("layout", ["vocab.txt", "tokenizer.json"])
@pytest.mark.parametrize("lower_case", [False, True])
def test_the_casing_overrides_change_both_alike(layout, lower_case, layouts, family_folders):
    folder = layouts["vocab.txt"] if layout == "vocab.txt" else family_folders["bert"]
    settings = {"lower_case": lower_case, "strip_accents": not lower_case}
    host, in_graph = load_host_tokenizer(folder, **settings), load_tokenizer(folder, **settings)
    texts = ["Café NAÏVE Straße", "GOOD film", *NASTY[:12]]
    assert host.tokenize(texts) == in_graph.tokenize(texts).to_list()
    assert host.tokenize(texts) != load_host_tokenizer(folder).tokenize(texts) or lower_case


@pytest.mark.slow  # one in-graph tokenizer traced a folder
@pytest.mark.parametrize(
    "folder",
    [
        *(f"tokenizer.json of {f}" for f in ("bert", "roberta", "xlm-roberta")),
        "vocab.txt",
        *SENTENCEPIECE_FILES,
        "vocab.json",
    ],  # fmt: skip
)
def test_a_saved_host_tokenizer_is_rebuilt_alike_in_the_graph(
    folder, family_folders, layouts, tmp_path
):
    """A JAX run saves its host tokenizer into the run (`save`); an export of the run builds
    it in the graph from there: the same ids and packing."""
    family = folder.removeprefix("tokenizer.json of ")
    host = load_host_tokenizer(family_folders[family] if family != folder else layouts[folder])
    host.save(tmp_path)
    texts = [text for text in CORPUS if text not in KNOWN_DIFFERENCES]
    saved = load_tokenizer(tmp_path)
    assert saved.special_ids == host.special_ids
    assert saved.tokenize(texts).to_list() == host.tokenize(texts)
    assert load_host_tokenizer(tmp_path).tokenize(CORPUS) == host.tokenize(CORPUS)


def test_a_saved_wordpiece_host_tokenizer_writes_the_in_graph_ones_files(layouts, tmp_path):
    load_host_tokenizer(layouts["vocab.txt"]).save(tmp_path / "host")
    load_tokenizer(layouts["vocab.txt"]).save(tmp_path / "graph")
    for name in ("vocab.txt", "tokenizer_config.json"):
        assert (tmp_path / "host" / name).read_bytes() == (tmp_path / "graph" / name).read_bytes()


def test_a_checkpoint_gives_the_host_tokenizer_build_tokenizer_gives(tiny_hf_dir):
    """`build_host_tokenizer`: a checkpoint's vocab.txt with its casing (the `--lower-case`
    flag overriding it), as `build_tokenizer` reads it."""
    checkpoint = read_checkpoint(tiny_hf_dir[0])
    host, in_graph = build_host_tokenizer(checkpoint), build_tokenizer(checkpoint)
    assert (checkpoint.lower_case, host.kind) == (True, "wordpiece")
    assert_same_outputs(host, in_graph, texts=CORPUS[:50])
    texts = ["Good film", "good film"]
    cased = build_host_tokenizer(checkpoint, lower_case=False).tokenize(texts)
    assert cased == build_tokenizer(checkpoint, lower_case=False).tokenize(texts).to_list()
    assert cased[0] != host.tokenize(texts)[0]


@pytest.mark.parametrize("pair_separators", [1, 2])
def test_numpy_packing_is_the_graphs_for_every_pair_of_lengths(pair_separators):
    special = {"cls_id": 7, "sep_id": 8, "pad_id": 9, "pair_separators": pair_separators}
    special["second_type_id"] = 2 - pair_separators
    grid = [(a, b) for a in range(11) for b in range(11)]
    ids_a = [list(range(100, 100 + a)) for a, _ in grid]
    ids_b = [list(range(200, 200 + b)) for _, b in grid]
    for max_seq_length in (2 + pair_separators, 5, 8, 13):
        for second in (None, ids_b):
            got = host_packing.pack_ids(ids_a, second, max_seq_length=max_seq_length, **special)
            expected = pack_inputs(
                tf.ragged.constant(ids_a, tf.int32),
                None if second is None else tf.ragged.constant(second, tf.int32),
                max_seq_length=max_seq_length,
                **special,
            )
            for name, value in expected.items():
                np.testing.assert_array_equal(got[name], value.numpy(), err_msg=name)


@pytest.mark.parametrize("spec", [WindowSpec(5, 0, 2), WindowSpec(6, 1, 4), WindowSpec(9, 3, 3)])
def test_numpy_windows_are_the_graphs_for_every_length(spec):
    ids = [list(range(1000, 1000 + n)) for n in range(30)]
    expected = window_ids(tf.ragged.constant(ids, tf.int32), spec, cls_id=1, sep_id=2, pad_id=3)
    for k in (None, 1, 6):
        got = host_packing.window_ids(ids, spec, max_chunks=k, cls_id=1, sep_id=2, pad_id=3)
        if k is None:
            for name, value in expected.items():
                np.testing.assert_array_equal(got[name], value.numpy(), err_msg=name)
        assert got["input_word_ids"].shape == (30, k or spec.max_chunks, spec.max_seq_length)


def test_what_the_in_graph_loader_refuses_the_host_refuses_alike(tmp_path, family_folders):
    with pytest.raises(CheckpointError, match="has no tokenizer: looked for"):
        load_host_tokenizer(tmp_path)
    spec = json.loads((family_folders["roberta"] / "tokenizer.json").read_text("utf-8"))
    spec["model"]["dropout"] = 0.1
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), "utf-8")
    with pytest.raises(CheckpointError) as in_graph:
        load_tokenizer(tmp_path)
    with pytest.raises(CheckpointError) as host:
        load_host_tokenizer(tmp_path)
    assert str(host.value) == str(in_graph.value) and "dropout=0.1" in str(host.value)


def test_a_tokenizer_json_that_pads_and_truncates_gives_every_id_unpadded(tmp_path, family_folders):
    spec = json.loads((family_folders["roberta"] / "tokenizer.json").read_text("utf-8"))
    spec["padding"] = {"strategy": {"Fixed": 64}, "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": 1, "pad_type_id": 0, "pad_token": "<pad>"}  # fmt: skip
    spec["truncation"] = {"direction": "Right", "max_length": 3, "strategy": "LongestFirst",
                          "stride": 0}  # fmt: skip
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), "utf-8")
    texts = ["a good film", "a long and very dull film"]
    expected = load_host_tokenizer(family_folders["roberta"]).tokenize(texts)
    assert load_host_tokenizer(tmp_path).tokenize(texts) == expected


def test_a_bpe_without_a_template_tokenizes_but_does_not_pack(tmp_path, family_folders):
    spec = json.loads((family_folders["roberta"] / "tokenizer.json").read_text("utf-8"))
    spec["post_processor"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), "utf-8")
    host, texts = load_host_tokenizer(tmp_path), ["a good <mask> film"]
    assert host.tokenize(texts) == load_host_tokenizer(family_folders["roberta"]).tokenize(texts)
    for tokenizer in (host, load_tokenizer(tmp_path)):
        with pytest.raises(CheckpointError, match="no cls token"):
            _ = tokenizer.special_ids
    with pytest.raises(CheckpointError, match="no cls token"):
        host(texts)


def test_the_host_tokenizer_runs_where_tensorflow_cannot_be_imported(family_folders, layouts):
    """What a TPU VM with JAX alone sees: `bertfit.text.host` imports, reads each kind of
    files, tokenizes, packs and cuts windows, as it does here (where the tests above hold it
    to the in-graph tokenizer)."""
    folders = [family_folders["bert"], family_folders["xlm-roberta"], layouts["xlm-roberta"],
               family_folders["modernbert"]]  # fmt: skip
    out = run_in_jax(["tests.without_tensorflow", "tests.text.host_without_tensorflow", *folders])
    report = json.loads(out.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert report["folders"] == [child.report(folder) for folder in folders]
