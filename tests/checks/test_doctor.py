"""`bertfit doctor`: the self-test a user runs first on a new machine (issue 43), here on a CPU,
where it is the rehearsal of what it measures on a TPU or GPU."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest

from bertfit.checks.doctor import DoctorReport, doctor, train_flops_per_token
from bertfit.cli import main
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.model.config import BertConfig
from bertfit.training.devices import PEAK_TFLOPS, _peak
from tests.tiny import sentiment_rows, train_args, write_csv

doctor_args = functools.partial(train_args, command="doctor", epochs=None, quiet=None)


def _config(model, train, **train_settings) -> RunConfig:
    return RunConfig(
        model=ModelConfig(name=str(model), max_seq_length=16),
        data=DataConfig(train=str(train), buckets=[8, 12, 16]),
        train=TrainConfig(batch_size=8, **train_settings),
    )


def _rows_of_every_length(n: int) -> list[tuple[str, str]]:
    """Rows whose lengths fill the buckets 8, 12 and 16."""
    rows = sentiment_rows(n, seed=3)
    return [(" ".join([text] * (1 + i % 3)), label) for i, (text, label) in enumerate(rows)]


@pytest.mark.slow
def test_on_a_cpu_it_times_the_steps_and_nothing_traces_after_the_warm_up(
    tmp_path, trainable_hf_dir
):
    train = write_csv(tmp_path / "train.csv", _rows_of_every_length(96))
    report = doctor(_config(trainable_hf_dir, train), steps=6)
    assert report.buckets == [8, 12, 16]  # every bucket of the data, one warm-up step each
    assert report.steps == 6 and report.step_seconds > 0
    assert report.examples_per_second == pytest.approx(8 / report.step_seconds)
    assert report.traces_after_warmup == 0 and report.compilations_after_warmup == 0
    assert report.compilations_at_warmup == 0  # TensorFlow's kernels on a CPU: no XLA
    assert report.peak_tflops > 0 and 0 < report.mfu < 1  # against this CPU's measured speed
    assert report.peak_memory_bytes > 100 * 2**20 and "RSS" in report.memory_source
    assert "none after warm-up (the goal)" in report.render()


@pytest.mark.slow
def test_with_xla_each_bucket_compiles_once_at_warm_up_and_never_again(tmp_path, trainable_hf_dir):
    """What a TPU run does: one XLA compilation per bucket shape, none after. More steps than
    an epoch has, so the second epoch's batches (shuffled anew) are timed too."""
    train = write_csv(tmp_path / "train.csv", _rows_of_every_length(48))
    report = doctor(_config(trainable_hf_dir, train, jit_compile=True), steps=12)
    assert report.buckets == [8, 12, 16]
    # the replica step per bucket, and the one-device update (one shape) once
    assert report.compilations_at_warmup == 3 + 1
    assert report.compilations_after_warmup == 0 and report.traces_after_warmup == 0


@pytest.mark.slow
def test_the_cli_prints_json_and_takes_trains_flags(tmp_path, trainable_hf_dir, capsys):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(32))
    assert main(doctor_args(trainable_hf_dir, train, steps=2, json=True, seed=3)) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == 2 and report["compilations_after_warmup"] == 0
    assert {"tensorflow", "build", "devices", "mfu", "peak_memory_bytes"} <= set(report)


def test_bad_settings_are_refused_as_train_refuses_them(tmp_path, trainable_hf_dir, capsys):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(32))
    assert main(doctor_args(trainable_hf_dir, train, steps=0)) == 2
    assert "--steps must be 1 or more" in capsys.readouterr().err
    assert main(doctor_args(trainable_hf_dir, train, precision="mixed_fp16")) == 2
    assert "needs a GPU" in capsys.readouterr().err


def test_model_flops_are_the_encoders_matrix_products_three_times_over():
    """MiniLM-L6 at 64 tokens: bench.common.bert_forward_gflop's forward, times 3."""
    minilm = BertConfig(hidden_size=384, intermediate_size=1536, num_hidden_layers=6)
    forward_gflop_64x64 = 89.4  # bench/common.py's doctest
    per_token = train_flops_per_token(minilm, 64)
    assert per_token * 64 * 64 / 1e9 == pytest.approx(3 * forward_gflop_64x64, rel=1e-3)


def test_the_peak_is_the_given_one_or_a_known_devices_or_unknown(monkeypatch):
    class OneReplica:
        num_replicas_in_sync = 1

    assert _peak(OneReplica(), "fp32", 100.0) == (100.0, "--peak-tflops per replica")
    monkeypatch.setattr("bertfit.training.devices._accelerators", lambda s: ["/device:GPU:0"])
    monkeypatch.setattr("bertfit.training.devices._device_name", lambda d: "NVIDIA H100 80GB HBM3")
    assert _peak(OneReplica(), "bf16", None) == (
        PEAK_TFLOPS["H100"][0],
        "H100 data sheet, 1 device(s)",
    )
    monkeypatch.setattr("bertfit.training.devices._device_name", lambda d: "Some New Chip")
    assert _peak(OneReplica(), "bf16", None)[0] is None
    report = DoctorReport(**{**_blank(), "peak_tflops": None})
    assert "unknown (give --peak-tflops)" in report.render()


def _blank() -> dict:
    return dict(
        tensorflow="2.21.0",
        build="tensorflow 2.21.0",
        devices=["/device:CPU:0"],
        strategy="default (one device)",
        replicas=1,
        xla="XLA for nothing",
        buckets=[16],
        warmup_seconds={16: 1.0},
        steps=1,
        step_seconds=0.1,
        examples_per_second=80.0,
        tokens_per_second=1280.0,
        tflops_per_second=0.001,
        peak_tflops=1.0,
        peak_source="test",
        peak_memory_bytes=None,
        memory_source="none",
        compilations_at_warmup=0,
        compilations_after_warmup=0,
        traces_at_warmup=1,
        traces_after_warmup=0,
    )


@pytest.mark.slow
def test_without_xla_the_tokens_counted_are_each_batchs_longest_rows(tmp_path, trainable_hf_dir):
    """On a CPU a batch is padded to its longest row, not its bucket: the MFU counts those
    tokens. Rows of one length give exactly that length, whatever their bucket."""
    rows = [("the film was good", "pos"), ("the film was bad", "neg")] * 8
    train = write_csv(tmp_path / "train.csv", rows)
    one_bucket = _config(trainable_hf_dir, train)
    report = doctor(dataclasses.replace(one_bucket, data=DataConfig(train=str(train))), steps=2)
    tokens_per_row = 4 + 2  # the words and [CLS], [SEP]
    assert report.tokens_per_second == pytest.approx(
        report.examples_per_second * tokens_per_row, rel=1e-6
    )
