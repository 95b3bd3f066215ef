"""GTE through bertfit's encoder equals transformers' `GteModel` (tiny random checkpoints, in
both spellings of config.json, with and without token types, NTK-scaled rotary embeddings as
Alibaba's code computes them)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit.checkpoints.families import family_of
from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder
from bertfit.errors import CheckpointError
from tests.families import TINY as FAMILY_TINY

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LENGTHS = (90, 37, 5)
TINY = {**FAMILY_TINY, "max_position_embeddings": 128, "pad_token_id": 1}


def _batch(type_ids: bool = False) -> dict:
    rng = np.random.default_rng(1)
    length = max(LENGTHS)
    ids = rng.integers(4, TINY["vocab_size"], size=(len(LENGTHS), length)).astype(np.int32)
    mask = (np.arange(length)[None] < np.array(LENGTHS)[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, TINY["pad_token_id"]).astype(np.int32)
    types = (np.arange(length)[None] >= 20) * mask if type_ids else np.zeros_like(ids)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types.astype(np.int32)}


def _write(path, model_class=transformers.GteModel, **overrides):
    torch.manual_seed(0)
    model = model_class(transformers.GteConfig(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model


def _theirs(model, inputs) -> np.ndarray:
    arguments = {
        "input_ids": torch.tensor(inputs["input_word_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(inputs["input_mask"], dtype=torch.long),
    }
    if model.config.type_vocab_size:
        arguments["token_type_ids"] = torch.tensor(inputs["input_type_ids"], dtype=torch.long)
    with torch.no_grad():
        return model(**arguments).last_hidden_state.numpy()


def _real_diff(encoder, inputs, expected) -> float:
    real = inputs["input_mask"].astype(bool)
    sequence = np.asarray(encoder(inputs)["sequence_output"])
    return float(np.abs(sequence[real] - expected[real]).max())


@pytest.mark.parametrize("type_vocab_size", [0, 2])  # gte-base-en-v1.5 has none
def test_matches_transformers(type_vocab_size, tmp_path):
    model = _write(tmp_path, type_vocab_size=type_vocab_size)
    encoder = build_encoder(read_hf(tmp_path))
    inputs = _batch(type_ids=type_vocab_size > 1)
    assert _real_diff(encoder, inputs, _theirs(model, inputs)) <= 1e-5
    report = encoder.load_report
    assert len(report.loaded) == len(encoder.named_variables())
    assert report.unexpected == [] and report.missing == []
    pooled = encoder(inputs, pooled_only=True)["pooled_output"].numpy()
    np.testing.assert_allclose(pooled, encoder(inputs)["sequence_output"].numpy()[:, 0], atol=1e-6)


def test_alibabas_config_with_ntk_scaling_matches_its_formula(tmp_path):
    """Alibaba's config.json (`model_type` "new", `rope_scaling` {"type": "ntk"}), which
    transformers 5 cannot run: its fixed NTK scaling, written in torch as Alibaba's
    `NTKScalingRotaryEmbedding` computes it, put into transformers' model."""
    factor, theta = 2.0, 500_000.0
    model = _write(tmp_path, rope_parameters={"rope_type": "default", "rope_theta": theta})
    dim = TINY["hidden_size"] // TINY["num_attention_heads"]
    inverse = 1.0 / ((theta * factor) ** (torch.arange(0, dim, 2).float() / dim))
    model.rotary_emb.inv_freq = inverse / factor ** (2 / dim)
    values = json.loads((tmp_path / "config.json").read_text())
    del values["rope_parameters"]
    values |= {
        "model_type": "new",
        "architectures": ["NewModel"],
        "rope_theta": theta,
        "rope_scaling": {"type": "ntk", "factor": factor},
        "position_embedding_type": "rope",
        "layer_norm_type": "layer_norm",
        "logn_attention_scale": False,
        "pack_qkv": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(values))
    checkpoint = read_hf(tmp_path)
    assert checkpoint.family == "GTE"
    inputs = _batch()
    assert _real_diff(build_encoder(checkpoint), inputs, _theirs(model, inputs)) <= 1e-5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "scales its rotary"),
        ({"rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.5}}, "scales its rotary"),
        ({"layer_norm_type": "rms_norm"}, "layer_norm_type"),
        ({"logn_attention_scale": True}, "log\\(length\\)"),
        ({"position_embedding_type": "absolute"}, "position_embedding_type"),
        ({"pack_qkv": False}, "pack_qkv"),
    ],
)
def test_refuses_what_it_does_not_compute(change, message):
    values = {"model_type": "new", "hidden_size": 32, "num_attention_heads": 4, **change}
    with pytest.raises(CheckpointError, match=message):
        family_of(values).read_config(values)


@pytest.mark.parametrize(
    ("model_class", "ignored"),
    [
        ("GteForMaskedLM", ("lm_head.",)),
        ("GteForSequenceClassification", ("pooler.", "classifier.")),
    ],
)
def test_task_checkpoints_load_their_encoder(model_class, ignored, tmp_path):
    """A task model's keys sit under "gte."; its heads (and pooler) are ignored."""
    model = _write(tmp_path, getattr(transformers, model_class))
    encoder = build_encoder(read_hf(tmp_path))
    inputs = _batch()
    assert _real_diff(encoder, inputs, _theirs(model.gte, inputs)) <= 1e-5
    report = encoder.load_report
    assert report.unexpected == [] and report.missing == []
    assert report.ignored and all(name.startswith(ignored) for name in report.ignored)
