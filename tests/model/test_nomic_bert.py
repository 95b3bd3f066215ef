"""NomicBERT through bertfit's encoder equals transformers' `NomicBertModel` (tiny random
checkpoints, in both spellings of config.json, token types, a rotation of part of each head as
Nomic's code computes it)."""

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

LENGTHS = (70, 29, 4)
TINY = {**FAMILY_TINY, "max_position_embeddings": 128}
# transformers' config.json keys -> Nomic's own (GPT-2's names), as its checkpoints ship them.
NOMIC_NAMES = {
    "hidden_size": "n_embd",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "intermediate_size": "n_inner",
    "max_position_embeddings": "n_positions",
    "layer_norm_eps": "layer_norm_epsilon",
}


def _batch() -> dict:
    rng = np.random.default_rng(1)
    length = max(LENGTHS)
    ids = rng.integers(4, TINY["vocab_size"], size=(len(LENGTHS), length)).astype(np.int32)
    mask = (np.arange(length)[None] < np.array(LENGTHS)[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, 0).astype(np.int32)
    types = ((np.arange(length)[None] >= 15) * mask).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def _write(path, model_class=transformers.NomicBertModel):
    torch.manual_seed(0)
    model = model_class(transformers.NomicBertConfig(**TINY)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model


def _theirs(model, inputs) -> np.ndarray:
    with torch.no_grad():
        return model(
            input_ids=torch.tensor(inputs["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(inputs["input_type_ids"], dtype=torch.long),
        ).last_hidden_state.numpy()


def _real_diff(encoder, inputs, expected) -> float:
    real = inputs["input_mask"].astype(bool)
    sequence = np.asarray(encoder(inputs)["sequence_output"])
    return float(np.abs(sequence[real] - expected[real]).max())


def _nomic_spelling(path, **settings) -> dict:
    """Rewrites `path`'s config.json as Nomic's code writes it; returns the new values."""
    values = json.loads((path / "config.json").read_text())
    theta = values.pop("rope_parameters")["rope_theta"]
    values = {NOMIC_NAMES.get(key, key): value for key, value in values.items()}
    del values["hidden_act"], values["head_dim"]
    values |= {
        "activation_function": "swiglu",
        "rotary_emb_base": theta,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "rotary_scaling_factor": None,
        "qkv_proj_bias": False,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "prenorm": False,
        "use_rms_norm": False,
        "causal": False,
        **settings,
    }
    (path / "config.json").write_text(json.dumps(values))
    return values


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("nomic_bert")
    return _write(path), path


def test_matches_transformers(written):
    model, path = written
    encoder = build_encoder(read_hf(path))
    inputs = _batch()
    assert _real_diff(encoder, inputs, _theirs(model, inputs)) <= 1e-5
    report = encoder.load_report
    assert len(report.loaded) == len(encoder.named_variables())
    assert report.unexpected == [] and report.missing == []
    pooled = encoder(inputs, pooled_only=True)["pooled_output"].numpy()
    np.testing.assert_allclose(pooled, encoder(inputs)["sequence_output"].numpy()[:, 0], atol=1e-6)


def test_nomics_own_config_reads_as_transformers(written, tmp_path):
    _, path = written
    config = read_hf(path).config
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((path / name).read_bytes())
    _nomic_spelling(tmp_path)
    assert read_hf(tmp_path).config == config
    assert config.variant["rope_theta"] == 1000.0 and not config.variant["qkv_bias"]


def test_part_of_each_head_rotated_as_nomics_code_does(tmp_path, monkeypatch):
    """`rotary_emb_fraction` 0.5: the first half of each head rotated, the rest passed, as
    flash-attention's rotary embedding (Nomic's) and GPT-NeoX's do; transformers' NomicBERT
    rotates whole heads, so its model is given GPT-NeoX's rotation of part of a head."""
    from transformers.models.gpt_neox import modeling_gpt_neox
    from transformers.models.nomic_bert import modeling_nomic_bert

    model = _write(tmp_path)
    monkeypatch.setattr(
        modeling_nomic_bert, "apply_rotary_pos_emb", modeling_gpt_neox.apply_rotary_pos_emb
    )
    rotary_dim = TINY["hidden_size"] // TINY["num_attention_heads"] // 2
    model.rotary_emb.inv_freq = 1.0 / (
        1000.0 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim)
    )
    _nomic_spelling(tmp_path, rotary_emb_fraction=0.5)
    inputs = _batch()
    assert _real_diff(build_encoder(read_hf(tmp_path)), inputs, _theirs(model, inputs)) <= 1e-5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prenorm": True}, "pre-LayerNorm"),
        ({"use_rms_norm": True}, "RMSNorm"),
        ({"rotary_emb_interleaved": True}, "interleaved"),
        ({"rotary_scaling_factor": 2.0}, "scaled rotary"),
        ({"num_experts": 8, "moe_every_n_layers": 2}, "mixture-of-experts"),
        ({"activation_function": "gelu"}, "'gelu' feed-forward"),
        ({"rotary_emb_fraction": 0.0}, "no rotary positions"),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "scaled rotary"),
    ],
)
def test_refuses_what_it_does_not_compute(change, message):
    values = {"model_type": "nomic_bert", "n_embd": 32, "n_head": 4, **change}
    with pytest.raises(CheckpointError, match=message):
        family_of(values).read_config(values)


@pytest.mark.parametrize(
    ("model_class", "ignored"),
    [
        ("NomicBertForMaskedLM", ("cls.",)),
        ("NomicBertForSequenceClassification", ("pooler.", "classifier.")),
    ],
)
def test_task_checkpoints_load_their_encoder(model_class, ignored, tmp_path):
    """A task model's keys sit under "nomic_bert."; its heads (and pooler) are ignored."""
    model = _write(tmp_path, getattr(transformers, model_class))
    encoder = build_encoder(read_hf(tmp_path))
    inputs = _batch()
    assert _real_diff(encoder, inputs, _theirs(model.nomic_bert, inputs)) <= 1e-5
    report = encoder.load_report
    assert report.unexpected == [] and report.missing == []
    assert report.ignored and all(name.startswith(ignored) for name in report.ignored)
