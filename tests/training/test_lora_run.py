"""A LoRA run (`--lora-rank`): it trains the adapters and the head only, saves them apart with
the base they were trained on, resumes exactly after SIGKILL, and its exports hold plain merged
weights that predict what the unmerged model predicts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file

from bertfit.errors import ConfigError
from bertfit.runs.checkpoint_files import latest_checkpoint
from tests.distributed import cluster
from tests.tiny import sentiment_rows, write_csv
from tests.training.kill import resume_args, run_killed, steps_of, train_here

TEXTS = ["a good film", "the plot was very boring", "not bad , not great", "fun !"]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, trainable_hf_dir):
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from bertfit.training.run import train

    path = tmp_path_factory.mktemp("lora")
    config = RunConfig(
        output_dir=str(path / "run"),
        model=ModelConfig(
            name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0, lora_rank=4, lora_alpha=8
        ),
        data=DataConfig(
            train=str(write_csv(path / "train.csv", sentiment_rows(64, seed=0))), buckets=[8, 16]
        ),
        train=TrainConfig(batch_size=8, epochs=1, learning_rate=1e-2, seed=0, strategy="default"),
    )
    return config, Path(train(config, quiet=True).run_dir)


@pytest.fixture(scope="module")
def int8_run(tmp_path_factory, lora_run):
    """`lora_run` again on an int8 frozen base (`--base-precision int8`)."""
    import dataclasses

    from bertfit.training.run import train

    config, _ = lora_run
    path = tmp_path_factory.mktemp("int8")
    config = dataclasses.replace(
        config,
        output_dir=str(path / "run"),
        model=dataclasses.replace(config.model, base_precision="int8"),
    )
    return config, Path(train(config, quiet=True).run_dir)


def _size(directory) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


@pytest.mark.slow
def test_a_lora_run_saves_small_adapters_apart_that_read_back_on_the_base(
    lora_run, trainable_hf_dir
):
    from bertfit.checkpoints.load import build_encoder, read_checkpoint
    from bertfit.inference.predictor import Classifier
    from bertfit.model.classifier import BertClassifier
    from bertfit.model.lora import enable_lora
    from bertfit.runs.weights import restore_adapters

    config, run = lora_run
    adapter = run / "checkpoints" / "adapter"
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert saved["base_model"] == str(trainable_hf_dir)
    assert saved["lora_rank"] == 4 and saved["adapted_layers"][0] == "layer_0/attention/query"
    assert _size(adapter) < _size(run / "checkpoints" / "best") / 4
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["model"]["trainable_parameters"] == saved["trained_parameters"]
    assert metrics["model"]["trainable_parameters"] < metrics["model"]["parameters"] / 10

    # The base as `--model` has it, the adapters and the head read back: the run's model.
    model = BertClassifier(build_encoder(read_checkpoint(str(trainable_hf_dir))), 2, dropout=0.0)
    enable_lora(model, 4, 8, ["auto"])
    restore_adapters(model, latest_checkpoint(adapter))
    expected = Classifier.from_run(run)
    got = Classifier(type(expected.module)(model, *_module_arguments(expected)), expected.metadata)
    np.testing.assert_allclose(got.predict_proba(TEXTS), expected.predict_proba(TEXTS), atol=1e-5)


def _module_arguments(classifier) -> tuple:
    module = classifier.module
    return (
        module.tokenizer,
        module.task,
        module.max_seq_length,
        module.buckets,
        module.pairs,
        module.windows,
    )


@pytest.mark.slow
def test_the_export_holds_merged_weights_that_predict_as_the_unmerged_model(
    lora_run, tmp_path, monkeypatch
):
    from bertfit.export.serving import export_classifier
    from bertfit.inference import run_model
    from bertfit.inference.predictor import Classifier

    _, run = lora_run
    exported = export_classifier(Classifier.from_run(run), tmp_path / "export")
    loaded = Classifier.from_export(tmp_path / "export")
    monkeypatch.setattr(run_model, "merge_lora", lambda model: 0)  # the adapters kept apart
    unmerged = Classifier.from_run(run)

    assert any("lora" in v.path for v in unmerged.module.model.weights)
    saved = tf.train.load_checkpoint(str(exported / "variables" / "variables"))
    assert not any("lora" in name for name in saved.get_variable_to_shape_map())
    np.testing.assert_allclose(
        loaded.predict_proba(TEXTS), unmerged.predict_proba(TEXTS), atol=1e-5
    )


@pytest.mark.slow
def test_an_int8_base_run_saves_int8_kernels_and_exports_them_dequantized(
    int8_run, lora_run, tmp_path, monkeypatch
):
    from bertfit.export.serving import export_classifier
    from bertfit.inference import run_model
    from bertfit.inference.predictor import Classifier

    _, run = int8_run
    best = load_file(latest_checkpoint(run / "checkpoints" / "best"))
    query = "model/encoder/layer_0/attention/query/kernel"
    assert best[query].dtype == np.int8 and best[query + "_scale"].dtype == np.float32
    assert _size(run / "checkpoints" / "best") < _size(lora_run[1] / "checkpoints" / "best")

    exported = export_classifier(Classifier.from_run(run), tmp_path / "export")
    saved = tf.train.load_checkpoint(str(exported / "variables" / "variables"))
    exported_dtypes = saved.get_variable_to_dtype_map()
    assert tf.int8 not in exported_dtypes.values()
    assert not any("lora" in name or "kernel_scale" in name for name in exported_dtypes)
    monkeypatch.setattr(run_model, "merge_lora", lambda model: 0)  # int8 and adapters kept
    unmerged = Classifier.from_run(run)
    np.testing.assert_allclose(
        Classifier.from_export(tmp_path / "export").predict_proba(TEXTS),
        unmerged.predict_proba(TEXTS),
        atol=1e-5,
    )


@pytest.mark.slow
@pytest.mark.parametrize("base", ["fp32", "int8"])
def test_a_lora_run_killed_mid_epoch_resumes_exactly(tmp_path, one_layer_hf_dir, base, capsys):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(32, seed=11))
    targets = "query,value,output"
    args = resume_args(
        one_layer_hf_dir, train, lora_rank=4, lora_targets=targets, base_precision=base
    )
    plain, killed = tmp_path / "plain", tmp_path / "killed"
    code, err = train_here([*args, "--output-dir", str(plain)], capsys)
    assert code == 0, err

    run_killed([*args, "--output-dir", str(killed)], ("steps", 5))
    code, err = train_here([*args, "--output-dir", str(killed)], capsys)
    assert code == 0 and "resuming the unfinished run" in err, err

    # As test_resume's bound: the killed steps ran in a process of their own, the others in this
    # worker, whose earlier tests can leave TensorFlow summing in another order (1.5e-8 seen
    # once); a resume that repeated, skipped or reshuffled a step would differ by ~1e-3.
    cluster.assert_same_weights(plain, killed, atol=1e-6)
    weights = cluster.final_weights(killed)
    assert any("lora_b" in name for name in weights)
    got, want = steps_of(killed), steps_of(plain)
    assert [s["global_step"] for s in got] == [s["global_step"] for s in want]
    np.testing.assert_allclose([s["loss"] for s in got], [s["loss"] for s in want], atol=1e-6)


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--lora-rank", "-1"], "model.lora_rank (--lora-rank) must be between 0"),
        (["--lora-rank", "8", "--lora-alpha", "0"], "model.lora_alpha (--lora-alpha) must be"),
        (["--lora-targets", " , "], "model.lora_targets (--lora-targets) must be at least one"),
        (["--base-precision", "bf16"], "model.base_precision (--base-precision) must be fp32"),
        (["--base-precision", "int8"], "int8: add --lora-rank 8, or leave --base-precision out"),
        (
            ["--lora-rank", "8", "--base-precision", "int8", "--precision", "mixed_fp16"],
            "model.base_precision (--base-precision) must be bf16 or fp32 with --precision",
        ),
    ],
)
def test_lora_settings_out_of_range_name_their_flag(flags, says):
    from bertfit.run_flags import add_train_arguments, run_config_from_args

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        run_config_from_args(parser.parse_args(["--train", "t.csv", *flags]))


def test_lora_flags_become_the_saved_config():
    from bertfit.run_flags import add_train_arguments, run_config_from_args

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    flags = ["--lora-rank", "16", "--lora-alpha", "32", "--lora-targets", "query, value,key"]
    config = run_config_from_args(parser.parse_args(["--train", "t.csv", *flags]))
    assert (config.model.lora_rank, config.model.lora_alpha) == (16, 32)
    assert config.to_dict()["model"]["lora_targets"] == ["query", "value", "key"]


@pytest.mark.slow
def test_check_counts_only_what_a_lora_run_trains(tmp_path, trainable_hf_dir):
    import dataclasses

    from bertfit.checks.api import check
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig

    train = write_csv(tmp_path / "train.csv", sentiment_rows(32, seed=0))
    model = ModelConfig(name=str(trainable_hf_dir), max_seq_length=16, lora_rank=4)
    config = RunConfig(
        model=model,
        data=DataConfig(train=str(train), buckets=[8, 16]),
        train=TrainConfig(batch_size=8, strategy="default"),
    )
    lora = check(config)
    full = check(dataclasses.replace(config, model=dataclasses.replace(model, lora_rank=0)))

    assert "grad-zero" not in lora.codes  # A's first gradient is zero by design (B starts at 0)
    assert lora.memory["parameters"] > full.memory["parameters"]  # the adapters
    assert lora.memory["training_state_bytes"] < full.memory["training_state_bytes"] / 5

    # An int8 base: its layers' kernels planned at a byte each, plus a float32 scale a column.
    int8 = check(
        dataclasses.replace(config, model=dataclasses.replace(model, base_precision="int8"))
    )
    assert not {"grad-none", "grad-step-failed"} & set(int8.codes)
    kernels = 2 * (4 * 32 * 32 + 2 * 32 * 64)  # 2 layers of 4 h x h, h x i and i x h kernels
    scales = 2 * (4 * 32 + 64 + 32)
    saved = lora.memory["parameters_bytes"] - int8.memory["parameters_bytes"]
    assert saved == 3 * kernels - 4 * scales
    assert int8.memory["plan"]["weights_bytes"] == int8.memory["parameters_bytes"]
