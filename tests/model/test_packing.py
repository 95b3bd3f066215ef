"""Packed batches (`--packing`): several examples per row, computed as if each were alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from bertfit.errors import ConfigError, InputFormatError
from bertfit.model.classifier import BertClassifier
from bertfit.model.deberta import DebertaSettings
from bertfit.model.encoder import check_packs
from bertfit.model.inputs import MASK, POSITIONS, STARTS, WORD_IDS, normalize_inputs
from bertfit.model.modernbert import ModernBertSettings
from bertfit.text.packing import pack_inputs, pack_rows
from tests.tiny import TINY_CONFIG, tiny_encoder

LENGTHS = (5, 2, 9, 3, 1)  # ids per example, before [CLS] and [SEP]
LAYOUT = [[0, 1, 3], [2, 4, -1]]  # the examples of each packed row; -1: an empty slot
ROW_LENGTH = 16

FAMILIES = {
    "bert": TINY_CONFIG,
    "roberta": dataclasses.replace(TINY_CONFIG, position_offset=2, type_vocab_size=1),
    "modernbert": dataclasses.replace(
        TINY_CONFIG,
        model_type="modernbert",
        absolute_positions=False,
        has_pooler=False,
        variant=dataclasses.asdict(
            ModernBertSettings(local_attention=4, global_attn_every_n_layers=2)
        ),
    ),
    "deberta-v3": dataclasses.replace(
        TINY_CONFIG,
        model_type="deberta-v2",
        absolute_positions=False,
        has_pooler=False,
        type_vocab_size=0,
        variant=DebertaSettings(position_buckets=4, max_relative_positions=8).to_dict(),
    ),
}


def _ids(lengths=LENGTHS, seed: int = 0) -> tf.RaggedTensor:
    rng = np.random.default_rng(seed)
    return tf.ragged.constant([rng.integers(5, 30, n).tolist() for n in lengths], tf.int32)


def _batches(ids: tf.RaggedTensor, length: int = ROW_LENGTH) -> tuple[dict, dict]:
    """The examples unpacked (one per row, padded to the longest) and packed as `LAYOUT` in
    rows of `length` tokens."""
    special = {"cls_id": 2, "sep_id": 3}
    unpacked = pack_inputs(ids, max_seq_length=ROW_LENGTH, padding="longest", **special)
    index = np.asarray(LAYOUT).reshape(-1)
    examples = pack_inputs(
        tf.gather(ids, np.maximum(index, 0)),
        max_seq_length=ROW_LENGTH,
        padding="longest",
        **special,
    )
    examples["input_mask"] *= tf.constant((index >= 0)[:, None].astype("int32"))
    return unpacked, pack_rows(examples, slots=len(LAYOUT[0]), length=length)


def _slots_of_examples() -> np.ndarray:
    """Where each example's logits are among the packed batch's slots."""
    flat = np.asarray(LAYOUT).reshape(-1)
    return np.array([int(np.flatnonzero(flat == i)[0]) for i in range(len(LENGTHS))])


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_packed_batch_gives_each_example_its_unpacked_logits(family, pooling):
    model = BertClassifier(tiny_encoder(FAMILIES[family]), 3, pooling, dropout=0.0, seed=1)
    unpacked, packed = _batches(_ids())
    alone = model(unpacked).numpy()
    together = model(packed).numpy()
    assert together.shape == (len(LAYOUT) * len(LAYOUT[0]), 3)
    np.testing.assert_allclose(together[_slots_of_examples()], alone, atol=1e-5)


def test_a_packed_row_as_long_as_modernberts_band_is_computed_densely():
    """A packed row of 16 windows (where an unpacked one computes only the band,
    `model.local_attention`) keeps its examples apart with the dense window."""
    model = BertClassifier(tiny_encoder(FAMILIES["modernbert"]), 3, "mean", dropout=0.0, seed=1)
    unpacked, packed = _batches(_ids(), length=32)  # window 2: 16 windows
    np.testing.assert_allclose(
        model(packed).numpy()[_slots_of_examples()], model(unpacked).numpy(), atol=1e-5
    )


def test_attention_never_crosses_examples_and_positions_restart():
    """Changing one example of a row changes no other example's logits; the packed inputs
    number each token's position within its example."""
    model = BertClassifier(tiny_encoder(), 2, "mean", dropout=0.0)
    _, packed = _batches(_ids())
    lengths = [[LENGTHS[i] + 2 for i in row if i >= 0] for row in LAYOUT]
    positions = packed[POSITIONS].numpy()
    assert positions[0, : sum(lengths[0])].tolist() == [p for n in lengths[0] for p in range(n)]
    rows = _ids().to_list()
    changed = tf.ragged.constant([[29] * len(r) if i == 1 else r for i, r in enumerate(rows)])
    _, perturbed = _batches(changed)
    before, after = model(packed).numpy(), model(perturbed).numpy()
    moved = np.abs(after - before).max(axis=1) > 1e-6
    assert moved.tolist() == [i == _slots_of_examples()[1] for i in range(len(moved))]


def test_the_packed_loss_and_gradients_equal_the_unpacked_ones():
    """The same examples' weighted mean loss and its gradients, within float32 rounding."""
    from bertfit.model.losses import batch_loss

    model = BertClassifier(tiny_encoder(), 3, "cls", dropout=0.0, seed=1)
    unpacked, packed = _batches(_ids())
    labels = np.array([0, 2, 1, 1, 0], "int32")
    weights = np.array([1.0, 0.5, 2.0, 1.0, 1.0], "float32")
    slots = _slots_of_examples()
    packed_labels = np.zeros(len(LAYOUT) * len(LAYOUT[0]), "int32")
    packed_weights = np.zeros_like(packed_labels, "float32")
    packed_labels[slots], packed_weights[slots] = labels, weights
    shape = np.shape(LAYOUT)
    batches = (
        {**unpacked, "label": labels, "example_weight": weights},
        {
            **packed,
            "label": packed_labels.reshape(shape),
            "example_weight": packed_weights.reshape(shape),
        },
    )
    results = []
    for batch in batches:
        batch = {**batch, "global_examples": np.float32(len(LENGTHS))}
        with tf.GradientTape() as tape:
            loss = batch_loss("single-label", batch, model(batch, training=True))
        gradients = tape.gradient(loss, model.trainable_variables)
        results.append((float(loss), [tf.convert_to_tensor(g).numpy() for g in gradients]))
    (loss_alone, grads_alone), (loss_packed, grads_packed) = results
    assert abs(loss_packed - loss_alone) < 1e-5
    for alone, together in zip(grads_alone, grads_packed, strict=True):
        np.testing.assert_allclose(together, alone, atol=1e-5)


def test_packed_inputs_come_as_a_pair():
    _, packed = _batches(_ids())
    with pytest.raises(InputFormatError, match="both input_positions and example_starts"):
        normalize_inputs({WORD_IDS: packed[WORD_IDS], MASK: packed[MASK], STARTS: packed[STARTS]})


def test_a_family_whose_layers_mix_neighbours_is_refused():
    conv = dataclasses.replace(
        FAMILIES["deberta-v3"], variant=DebertaSettings(conv_kernel_size=3).to_dict()
    )
    with pytest.raises(ConfigError, match="--packing: the deberta-v2 encoder of tiny"):
        check_packs(conv, "tiny")
    for config in FAMILIES.values():
        check_packs(config, "tiny")


@pytest.mark.slow
def test_remat_recomputes_a_packed_step_to_the_same_gradients():
    """--remat with --packing: the last layer computes the examples' first tokens alone (at
    their starts), recomputed in the backward pass like every other layer."""
    _, packed = _batches(_ids())
    results = []
    for remat in (False, True):
        model = BertClassifier(tiny_encoder(), 3, "cls", dropout=0.0, seed=1)
        model.encoder.remat = remat

        @tf.function
        def step(model=model):
            with tf.GradientTape() as tape:
                logits = model(packed, training=True)
                loss = tf.reduce_sum(logits * tf.range(1.0, 4.0))
            return [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]

        results.append([g.numpy() for g in step()])
    for plain, recomputed in zip(*results, strict=True):
        np.testing.assert_allclose(recomputed, plain, atol=1e-6)
