import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder
from bertfit.errors import CheckpointError
from tests.tiny import tiny_inputs, write_tiny_hf


def test_tiny_hf_checkpoint_loads_back_with_identical_outputs(tiny_hf_dir):
    path, source = tiny_hf_dir
    encoder = build_encoder(read_hf(path))
    inputs = tiny_inputs()
    np.testing.assert_array_equal(
        encoder(inputs)["sequence_output"], source(inputs)["sequence_output"]
    )
    assert len(encoder.load_report.loaded) == len(encoder.named_variables())
    assert encoder.load_report.missing == encoder.load_report.unexpected == []


def test_bert_prefix_is_accepted(tmp_path):
    source = write_tiny_hf(tmp_path, prefix="bert.")
    encoder = build_encoder(read_hf(tmp_path))
    inputs = tiny_inputs()
    np.testing.assert_array_equal(encoder(inputs)["pooled_output"], source(inputs)["pooled_output"])


def _rewrite(path, change):
    tensors = load_file(str(path / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(path / "model.safetensors"))


def test_missing_layer_is_an_error_naming_the_tensor(tmp_path):
    write_tiny_hf(tmp_path)
    _rewrite(tmp_path, lambda t: t.pop("encoder.layer.1.attention.self.key.weight"))
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.1\.attention\.self\.key\.weight"):
        build_encoder(read_hf(tmp_path))


def test_wrong_shape_is_an_error_naming_the_tensor_and_both_shapes(tmp_path):
    write_tiny_hf(tmp_path)
    _rewrite(
        tmp_path,
        lambda t: t.update(
            {"encoder.layer.0.intermediate.dense.weight": np.zeros((48, 32), "float32")}
        ),
    )
    with pytest.raises(
        CheckpointError, match=r"intermediate\.dense\.weight: checkpoint \(32, 48\)"
    ):
        build_encoder(read_hf(tmp_path))


def test_absent_pooler_is_allowed_and_reported(tmp_path):
    write_tiny_hf(tmp_path)
    _rewrite(tmp_path, lambda t: [t.pop(k) for k in ("pooler.dense.weight", "pooler.dense.bias")])
    encoder = build_encoder(read_hf(tmp_path))
    report = encoder.load_report
    assert report.missing == ["pooler.dense.weight", "pooler.dense.bias"]
    assert "missing (left as initialised)" in str(report)
    assert np.std(encoder.pooler.kernel.numpy()) > 0  # drawn at random, as a new pooler is


def test_extra_tensors_are_reported_as_unexpected(tmp_path):
    write_tiny_hf(tmp_path)
    _rewrite(tmp_path, lambda t: t.update({"adapter.weight": np.zeros(3, "float32")}))
    assert build_encoder(read_hf(tmp_path)).load_report.unexpected == ["adapter.weight"]


def test_config_that_disagrees_with_weights_is_an_error(tmp_path):
    write_tiny_hf(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"encoder\.layer\.2\."):
        build_encoder(read_hf(tmp_path))


def test_truncated_safetensors_is_an_error(tmp_path):
    write_tiny_hf(tmp_path)
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        read_hf(tmp_path)
