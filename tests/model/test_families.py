"""Every family's encoder computes what transformers computes from the same checkpoint."""

from __future__ import annotations

import numpy as np
import pytest

from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder
from bertfit.errors import CheckpointError
from tests.families import FAMILIES, write_family_model
from tests.jax_process import run_in_jax

torch = pytest.importorskip("torch")


def padded_batch(pad_id: int, vocab: int = 99, seq: int = 12):
    rng = np.random.default_rng(3)
    ids = rng.integers(5, vocab, (3, seq)).astype("int32")
    lengths = [seq, 7, 3]
    mask = (np.arange(seq)[None, :] < np.array(lengths)[:, None]).astype("int32")
    ids = np.where(mask == 1, ids, pad_id).astype("int32")
    types = np.zeros_like(ids)
    types[0, 6:] = 1
    return ids, mask, types


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """family -> (its checkpoint folder, the padded batch's inputs, transformers' outputs):
    each family written once for the module; the inputs are also `inputs.npz` there, for the
    JAX process (`tests/model/jax_family_outputs.py`)."""
    written = {}
    for family in FAMILIES:
        folder = tmp_path_factory.mktemp(family)
        reference = write_family_model(family, folder)
        config = read_hf(folder).config
        ids, mask, types = padded_batch(config.pad_token_id)
        types = types if config.type_vocab_size > 1 else np.zeros_like(types)
        inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}
        np.savez(folder / "inputs.npz", **inputs)
        arguments = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
        if config.type_vocab_size:
            arguments["token_type_ids"] = torch.tensor(types)
        with torch.no_grad():
            written[family] = folder, inputs, reference(**arguments)
    return written


@pytest.mark.parametrize("family", FAMILIES)
def test_outputs_equal_transformers_on_a_padded_batch(family, written):
    folder, inputs, theirs = written[family]
    encoder = build_encoder(read_hf(folder))
    assert not encoder.load_report.unexpected
    ours = encoder(inputs)
    real = inputs["input_mask"].astype(bool)
    sequence = ours["sequence_output"].numpy()[real]
    np.testing.assert_allclose(sequence, theirs.last_hidden_state.numpy()[real], atol=1e-5)
    pooler = getattr(theirs, "pooler_output", None)
    assert ("pooled_output" in ours) == (pooler is not None)
    if pooler is not None:
        np.testing.assert_allclose(ours["pooled_output"].numpy(), pooler.numpy(), atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_pooled_only_gives_the_same_vector(family, written):
    folder, inputs, _ = written[family]
    encoder = build_encoder(read_hf(folder))
    inputs = {**inputs, "input_type_ids": np.zeros_like(inputs["input_type_ids"])}
    full = encoder(inputs)
    expected = full.get("pooled_output", full["sequence_output"][:, 0])
    pooled = encoder(inputs, pooled_only=True)["pooled_output"]
    np.testing.assert_allclose(pooled.numpy(), np.asarray(expected), atol=1e-5)


@pytest.fixture(scope="module")
def on_jax(written):
    """family -> bertfit's sequence output on Keras' JAX backend, every family's checkpoint
    loaded in one JAX process."""
    folders = {family: folder for family, (folder, _, _) in written.items()}
    run_in_jax(["tests.model.jax_family_outputs", *folders.values()])
    return {family: np.load(folder / "jax.npy") for family, folder in folders.items()}


@pytest.mark.slow  # every family's checkpoint loaded in one JAX process
@pytest.mark.parametrize("family", FAMILIES)
def test_outputs_on_jax_equal_transformers(family, written, on_jax):
    _, inputs, theirs = written[family]
    real = inputs["input_mask"].astype(bool)
    np.testing.assert_allclose(
        on_jax[family][real], theirs.last_hidden_state.numpy()[real], atol=1e-5
    )


def test_an_unsupported_model_type_is_named_in_one_sentence(tmp_path):
    write_family_model("bert", tmp_path)
    config = (tmp_path / "config.json").read_text().replace('"bert"', '"gpt2"')
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(CheckpointError) as error:
        read_hf(tmp_path)
    message = str(error.value)
    assert "'gpt2' model" in message and "RoBERTa" in message and "\n" not in message


def test_a_shape_mismatch_names_a_few_tensors_then_counts_the_rest(tmp_path):
    write_family_model("bert", tmp_path)
    config = (
        (tmp_path / "config.json").read_text().replace('"hidden_size": 32', '"hidden_size": 64')
    )
    (tmp_path / "config.json").write_text(config)
    with pytest.raises(CheckpointError, match=r"and \d+ more"):
        build_encoder(read_hf(tmp_path))


@pytest.mark.parametrize("family", ["bert", "albert", "electra"])
def test_default_is_tf_hubs_whole_input_output(family, tmp_path):
    """TF Hub's BERT contract: `default` is `pooled_output` (the first token's output for a
    family without a pooler), as `convert --to tf-hub` writes it."""
    write_family_model(family, tmp_path)
    encoder = build_encoder(read_hf(tmp_path))
    ids, mask, _ = padded_batch(encoder.config.pad_token_id)
    outputs = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": 0 * ids})
    expected = outputs.get("pooled_output", outputs["sequence_output"][:, 0])
    np.testing.assert_array_equal(outputs["default"].numpy(), np.asarray(expected))
    assert ("pooled_output" in outputs) == (family != "electra")
