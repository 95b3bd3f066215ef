"""A pruned vocabulary (`bertfit distill --prune-vocab`): which ids are kept, and the tokenizer
that renumbers the whole tokenizer's ids to them in the graph."""

import numpy as np
import pytest

from bertfit.errors import CheckpointError
from bertfit.text.vocab_map import VOCAB_MAP_FILE, kept_ids, read_vocab_map
from tests.tiny import TINY_VOCAB

ID = {token: i for i, token in enumerate(TINY_VOCAB)}


@pytest.fixture(scope="module")
def whole():
    from bertfit.text.tokenizer import BertTokenizer

    return BertTokenizer(TINY_VOCAB)


def test_the_kept_ids_are_the_ones_the_texts_use_and_every_special_token(whole):
    used = whole.tokenize_all(["the film was good", "boring plot!"]).values
    kept = kept_ids(used, whole.special_token_ids)
    words = ["the", "film", "was", "good", "boring", "plot", "!"]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert kept.tolist() == sorted(ID[t] for t in specials + words)


def test_seen_ids_are_renumbered_and_unseen_ones_read_as_the_unknown_token(whole, tmp_path):
    from bertfit.text.loading import load_tokenizer
    from bertfit.text.pruned import PrunedTokenizer

    kept = np.array(sorted(ID[t] for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "film", "good"]))
    pruned = PrunedTokenizer(whole, kept)
    new = {TINY_VOCAB[old]: i for i, old in enumerate(kept)}
    assert pruned.vocab_size == 6
    # "bad" and "##ly" are in the whole vocabulary, not kept: each reads as [UNK]
    text = "good film , badly"
    assert whole.tokenize(text).numpy().tolist() == [ID[t] for t in "good film , bad ##ly".split()]
    unk = new["[UNK]"]
    assert pruned.tokenize([text]).to_list() == [[new["good"], new["film"], unk, unk, unk]]
    packed = pruned(["good"], max_seq_length=5)["input_word_ids"].numpy().tolist()
    assert packed == [[new["[CLS]"], new["good"], new["[SEP]"], new["[PAD]"], new["[PAD]"]]]

    pruned.save(tmp_path)  # the whole tokenizer's files and vocab_map.npy: a run's folder
    again = load_tokenizer(tmp_path)
    assert again.tokenize([text]).to_list() == pruned.tokenize([text]).to_list()
    assert again.vocab_size == 6


def test_a_vocabulary_map_that_does_not_fit_its_vocabulary_is_refused(tmp_path):
    for broken in ([3, 2], [0, len(TINY_VOCAB)], [[0, 1]]):
        np.save(tmp_path / VOCAB_MAP_FILE, np.array(broken))
        with pytest.raises(CheckpointError, match="expected increasing ids of the 41-token"):
            read_vocab_map(tmp_path, len(TINY_VOCAB))
    (tmp_path / VOCAB_MAP_FILE).write_bytes(b"not numpy")
    with pytest.raises(CheckpointError, match="not a vocabulary map bertfit wrote"):
        read_vocab_map(tmp_path, len(TINY_VOCAB))


def test_the_host_tokenizer_renumbers_a_pruned_vocabulary_as_the_graph_does(whole, tmp_path):
    from bertfit.text.host import load_host_tokenizer
    from bertfit.text.pruned import PrunedTokenizer

    pruned = PrunedTokenizer(whole, np.array([0, 1, 2, 3, 4, ID["film"], ID["good"]]))
    pruned.save(tmp_path)
    host = load_host_tokenizer(tmp_path)  # what --backend jax predicts with
    texts, pairs = ["good film , badly", "[MASK] good"], ["film", ""]
    assert host.vocab_size == 7 and host.special_ids == pruned.special_ids
    assert host.tokenize(texts) == pruned.tokenize(texts).to_list()
    # what `bertfit distill --prune-vocab --backend jax` keeps of a pruned teacher
    assert host.special_token_ids == pruned.special_token_ids == [1, 2, 3, 0, 4]
    used = host.tokenize_all(texts).values
    np.testing.assert_array_equal(used, pruned.tokenize_all(texts).values)
    packed, graph = host(texts, pairs, max_seq_length=8), pruned(texts, pairs, max_seq_length=8)
    for name, value in packed.items():
        np.testing.assert_array_equal(value, graph[name].numpy(), err_msg=name)
    host.save(tmp_path / "again")
    assert load_host_tokenizer(tmp_path / "again").tokenize(texts) == host.tokenize(texts)
    with pytest.raises(CheckpointError, match="which a tokenizer.json cannot say"):
        host.packing_tokenizer(8)  # ONNX's tokenizer.json
