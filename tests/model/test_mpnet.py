"""MPNet through bertfit's encoder equals transformers' `MPNetModel` (tiny random checkpoints,
inputs longer than the relative buckets' exact range and their longest distance)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from keras import ops

from bertfit.checkpoints.families import family_of
from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder
from bertfit.errors import CheckpointError
from bertfit.model.relative_positions import relative_position_buckets
from tests.families import TINY as FAMILY_TINY

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LENGTHS = (150, 61, 4)  # right-padded to 150: distances past 128, where the buckets saturate
TINY = {**FAMILY_TINY, "max_position_embeddings": 160}


def _batch(pad_id: int = 1) -> dict:
    rng = np.random.default_rng(1)
    length = max(LENGTHS)
    ids = rng.integers(4, TINY["vocab_size"], size=(len(LENGTHS), length)).astype(np.int32)
    mask = (np.arange(length)[None] < np.array(LENGTHS)[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, pad_id).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids)}


def _theirs(model, inputs) -> np.ndarray:
    with torch.no_grad():
        return model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        ).last_hidden_state.numpy()


def _real_diff(sequence, inputs, expected) -> float:
    real = inputs["input_mask"].astype(bool)
    return float(np.abs(np.asarray(sequence)[real] - expected[real]).max())


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """(encoder, inputs, transformers' last_hidden_state, checkpoint path)."""
    path = tmp_path_factory.mktemp("mpnet")
    torch.manual_seed(0)
    model = transformers.MPNetModel(transformers.MPNetConfig(**TINY)).eval()
    with torch.no_grad():  # every weight away from its initial value, the bias table large
        for name, parameter in model.named_parameters():
            parameter.normal_(0.0, 2.0 if "relative_attention_bias" in name else 0.2)
    model.save_pretrained(path)
    inputs = _batch()
    return build_encoder(read_hf(path)), inputs, _theirs(model, inputs), path


def test_matches_transformers(loaded):
    encoder, inputs, expected, _ = loaded
    assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) <= 1e-5
    report = encoder.load_report
    assert len(report.loaded) == len(encoder.named_variables())
    assert report.unexpected == [] and report.missing == []


def test_the_relative_bias_matters(loaded):
    """Without the bias the outputs differ: the test above is a test of it."""
    encoder, inputs, expected, _ = loaded
    table = encoder.parts.relative_attention_bias.embeddings
    kept = table.numpy()
    try:
        table.assign(np.zeros_like(kept))
        assert _real_diff(encoder(inputs)["sequence_output"], inputs, expected) > 1e-2
    finally:
        table.assign(kept)


def test_pooled_only_gives_the_poolers_vector(loaded):
    encoder, inputs, _, _ = loaded
    pooled = encoder(inputs, pooled_only=True)["pooled_output"].numpy()
    np.testing.assert_allclose(pooled, encoder(inputs)["pooled_output"].numpy(), atol=1e-6)


def test_buckets_are_transformers_at_every_distance():
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    relative = np.arange(-9000, 9000)
    expected = MPNetEncoder.relative_position_bucket(torch.tensor(relative)).numpy()
    ours = relative_position_buckets(ops.convert_to_tensor(relative, "int32"))
    np.testing.assert_array_equal(ops.convert_to_numpy(ours), expected)


def test_config_reads_as_robertas_positions_without_token_types(loaded):
    _, _, _, path = loaded
    values = json.loads((path / "config.json").read_text())
    config = family_of(values).read_config(values)
    assert (config.position_offset, config.type_vocab_size, config.pad_token_id) == (2, 0, 1)
    assert config.max_sequence_length == TINY["max_position_embeddings"] - 2
    with pytest.raises(CheckpointError, match="relative_attention_num_buckets is 16"):
        family_of(values).read_config({**values, "relative_attention_num_buckets": 16})


def test_masked_lm_checkpoint(tmp_path):
    """A task model's keys sit under "mpnet."; the masked-LM head's are ignored."""
    torch.manual_seed(0)
    model = transformers.MPNetForMaskedLM(transformers.MPNetConfig(**TINY)).eval()
    model.save_pretrained(tmp_path)
    checkpoint = read_hf(tmp_path)
    assert checkpoint.family == "MPNet"
    encoder = build_encoder(checkpoint)
    inputs = _batch()
    assert (
        _real_diff(encoder(inputs)["sequence_output"], inputs, _theirs(model.mpnet, inputs)) <= 1e-5
    )
    report = encoder.load_report
    assert report.unexpected == [] and report.missing == [
        "pooler.dense.weight",
        "pooler.dense.bias",
    ]
    assert report.ignored and all(name.startswith("lm_head.") for name in report.ignored)
