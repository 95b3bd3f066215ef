"""`bertfit check`'s memory plan (`checks/memory.py`): the peak of a training step per replica,
the settings that make it fit a device, and the prediction against the measured peak."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from bertfit.checks.findings import Report
from bertfit.checks.memory import (
    Adapters,
    Architecture,
    int8_base_saving,
    parse_memory,
    plan,
    report_fit,
    what_fits,
)
from bertfit.checks.model import memory_per_replica
from bertfit.cli import main
from bertfit.errors import ConfigError
from bertfit.model.classifier import BertClassifier
from bertfit.model.int8 import quantize_base
from bertfit.model.lora import adapted_layers, enable_lora
from tests.checks.test_cli import check_args
from tests.tiny import sentiment_rows, tiny_encoder, write_csv
from tests.xla_flags import without_quick_xla

BERT_LARGE = Architecture(layers=24, hidden=1024, intermediate=4096, heads=16)


@pytest.mark.parametrize(
    "text, size",
    [
        ("16GB", 16 * 2**30),
        ("16 GiB", 16 * 2**30),
        ("15.5G", int(15.5 * 2**30)),
        ("800MB", 800 * 2**20),
    ],
)
def test_device_memory_sizes(text, size):
    assert parse_memory(text) == size


@pytest.mark.parametrize("text", ["lots", "16XB", "-1GB", "0GB", ""])
def test_a_device_memory_that_is_not_a_size_says_how_to_write_one(text):
    with pytest.raises(ConfigError, match=r"--device-memory .* e\.g\. 16GB"):
        parse_memory(text)


def test_gradients_and_slots_count_the_trainable_weights_only():
    """A frozen base (as with LoRA) has weights but neither gradients nor AdamW slots."""
    model = BertClassifier(tiny_encoder(), 2, "cls", dropout=0.0)
    full = memory_per_replica(model, [(8, 16)])
    model.encoder.trainable = False
    frozen = memory_per_replica(model, [(8, 16)])
    head = frozen["trainable_parameters"]
    assert head == 32 * 2 + 2  # the classification layer alone
    assert frozen["parameters_bytes"] == full["parameters_bytes"]
    assert frozen["plan"]["gradients_bytes"] == head * 4
    assert frozen["plan"]["optimizer_bytes"] == head * 8
    assert full["plan"]["gradients_bytes"] == full["trainable_parameters"] * 4
    assert frozen["plan"]["peak_bytes"] < full["plan"]["peak_bytes"]


def test_remat_keeps_each_layer_input_and_one_layer():
    tokens, seq = 1 * 256, 256
    plain = BERT_LARGE.activation_bytes((1, seq), 4, remat=False)
    remat = BERT_LARGE.activation_bytes((1, seq), 4, remat=True)
    one_layer = tokens * BERT_LARGE.layer_values_per_token(seq) * 4
    assert remat == 24 * tokens * 1024 * 4 + one_layer
    assert plain == 24 * one_layer + tokens * 1024 * 4
    assert remat < plain / 10


def test_a_lora_plan_keeps_x_a_per_adapted_layer_and_nothing_of_a_kernel_s_size():
    """LoRA adds [tokens, rank] float32 per adapted layer (one layer's with remat); a bf16 or
    int8 base adds its float32 copies on this CPU (`Adapters.base_copies_bytes`)."""
    tokens, kernels = 256, 24 * (4 * 1024**2 + 2 * 1024 * 4096)
    lora = Adapters(layers=48, rank=8)
    full = plan(1_220_000_000, 300_000, BERT_LARGE, (1, 256))
    adapted = plan(1_220_000_000, 300_000, BERT_LARGE, (1, 256), adapters=lora)
    assert adapted.activations_bytes - full.activations_bytes == 48 * tokens * 8 * 4
    remat = plan(1_220_000_000, 300_000, BERT_LARGE, (1, 256), remat=True, adapters=lora)
    assert remat.activations_bytes == BERT_LARGE.activation_bytes((1, 256), 4, True) + (
        2 * tokens * 8 * 4
    )
    assert adapted.base_copies_bytes == 0
    bf16 = plan(610_000_000, 300_000, BERT_LARGE, (1, 256), 2, adapters=Adapters(48, 8, 2))
    assert bf16.base_copies_bytes == kernels * 4
    int8 = plan(320_000_000, 300_000, BERT_LARGE, (1, 256), adapters=Adapters(48, 8, 1))
    assert int8.base_copies_bytes == kernels * 4 + 1024 * 4096 * 4  # + one dequantized kernel


def test_the_plan_reads_a_models_adapters_and_its_base_s_precision():
    model = BertClassifier(tiny_encoder(), 2, "cls", dropout=0.0)
    assert memory_per_replica(model, [(8, 16)])["plan"]["base_copies_bytes"] == 0
    quantize_base(adapted_layers(model).values())
    enable_lora(model, rank=2, alpha=None, targets=["auto"])  # 2 layers' query and value
    memory = memory_per_replica(model, [(8, 16)])
    architecture = Architecture(**memory["architecture"])
    want = plan(1, 1, architecture, (8, 16), adapters=Adapters(4, 2, 1))
    assert memory["plan"]["activations_bytes"] == want.activations_bytes
    assert memory["plan"]["base_copies_bytes"] == want.base_copies_bytes > 0


def test_what_fits_names_each_setting_that_alone_makes_the_step_fit():
    # BERT-large, full fine-tuning, fp32: ~5 GB of weights, gradients and slots
    step = plan(1_340_000_000, 335_000_000, BERT_LARGE, (32, 512))
    assert step.peak_bytes > 16 * 2**30
    fixes = what_fits(step, BERT_LARGE, 16 * 2**30)
    assert fixes[0] == "--remat"
    assert fixes[1].startswith("a batch of 4 per replica")
    assert fixes[2] == "--max-seq-length 128"
    assert what_fits(step, BERT_LARGE, 4 * 2**30) == []  # the state alone exceeds it


def test_a_step_that_does_not_fit_is_an_error_with_the_fixes():
    model = BertClassifier(tiny_encoder(), 2, "cls", dropout=0.0)
    memory = memory_per_replica(model, [(64, 64)])
    report = Report()
    report_fit(report, memory, memory["plan"]["peak_bytes"] - 1, "tiny", head=66, lora=True)
    (finding,) = report.findings
    assert finding.code == "memory-exceeds-device" and finding.severity == "error"
    assert finding.message.startswith("does not fit")
    assert finding.fix.startswith("fits with --remat, or a batch of 32 per replica")
    assert "--lora-rank 8" in finding.fix
    report = Report()
    report_fit(report, memory, memory["plan"]["peak_bytes"], "tiny", head=66)
    assert report.codes == ["memory-fits"]
    report = Report()  # this machine's memory, not asked for: said only when short
    report_fit(report, memory, memory["plan"]["peak_bytes"], "tiny", head=66, say_fits=False)
    assert report.codes == []


def test_a_bf16_lora_run_that_does_not_fit_is_told_an_int8_base_would_an_fp32_one_not():
    """On this CPU an int8 base keeps the float32 kernels it was quantized from (the plan's
    `base_copies_bytes`), so from an fp32 base it raises the peak; from a bf16 base, whose
    float32 copies XLA makes anyway, it frees the kernels' second byte."""
    kernels, scales = 24 * 12 * 2**20, 24 * (4 * 1024 + 4096 + 1024) * 4
    dequantized = 1024 * 4096 * 4  # one kernel at a time, float32
    assert int8_base_saving(BERT_LARGE, base_bytes=2) == kernels - scales - dequantized
    assert int8_base_saving(BERT_LARGE, base_bytes=4) < 0
    # BERT-large with LoRA on a bf16 base: 0.67 GB of weights, 24 x 12.6M of them in kernels
    step = plan(670_000_000, 1_200_000, BERT_LARGE, (1, 256), 2, adapters=Adapters(48, 8, 2))
    memory = {"plan": step.to_dict(), "architecture": dataclasses.asdict(BERT_LARGE)}
    device = step.peak_bytes - int8_base_saving(BERT_LARGE, base_bytes=2) // 2

    report = Report()
    report_fit(report, memory, device, "large", head=2050, base_bytes=2)
    (finding,) = report.findings
    assert finding.code == "memory-exceeds-device"
    assert "--base-precision int8" in finding.fix
    report = Report()  # the same peak on an fp32 base: int8 would not lower it here
    report_fit(report, memory, device, "large", head=2050, base_bytes=4)
    assert "--base-precision int8" not in report.findings[0].fix


def test_check_cli_device_memory(tmp_path, trainable_hf_dir, capsys):
    data = write_csv(tmp_path / "train.csv", sentiment_rows(32))
    assert main([*check_args(trainable_hf_dir, data, json=True), "--device-memory", "64KB"]) == 2
    report = json.loads(capsys.readouterr().out)
    (finding,) = [f for f in report["findings"] if f["code"] == "memory-exceeds-device"]
    assert "does not fit 64 KiB" in finding["message"]
    assert report["memory"]["plan"]["peak_bytes"] > 64 * 2**10
    assert main([*check_args(trainable_hf_dir, data), "--device-memory", "lots"]) == 2
    assert "--device-memory 'lots' is not a memory size" in capsys.readouterr().err


@pytest.mark.slow  # each setting compiles its step in a fresh process: ~1 min
@pytest.mark.parametrize(
    "batch, seq, remat, lora_rank", [(8, 256, False, 0), (32, 64, True, 0), (16, 128, False, 8)]
)
def test_the_plan_is_within_15_percent_of_the_measured_peak(
    batch, seq, remat, lora_rank, monkeypatch
):
    """The prediction against the peak resident memory of the real compiled step on this CPU
    (`bench/memory.py`), on a small encoder whose activations are much of the peak, at shapes
    other than the 16 x 128 the counts were calibrated at, and with LoRA adapters. A LoRA step
    may be over-predicted by up to 20% (`bertfit.checks.memory`: its runtime is fitted with the
    full steps'); an under-prediction, the side that runs out of memory, never by 15%."""
    from bench.memory import Setting, measure_in_subprocess

    setting = Setting(
        "small",
        layers=4,
        hidden=256,
        heads=4,
        intermediate=1024,
        vocab=1000,
        batch=batch,
        seq=seq,
        remat=remat,
        lora_rank=lora_rank,
    )
    # measured as a user's step compiles: XLA's default optimisations and fusions
    monkeypatch.setenv("XLA_FLAGS", without_quick_xla(os.environ["XLA_FLAGS"]))
    row = measure_in_subprocess(setting, timeout=600)
    measured, predicted = row["measured_peak_bytes"], row["predicted"]["peak_bytes"]
    over = 0.20 if lora_rank else 0.15
    assert -0.15 < row["error"] < over, (
        f"predicted {predicted / 2**20:.0f} MiB, measured {measured / 2**20:.0f} MiB"
    )


def test_a_model_whose_state_dwarfs_its_activations_peaks_in_the_update():
    """BERT-large at batch 1: the clipped copy of the gradients outweighs the activations
    (bench/memory.py measured the remat step's peak no lower than the plain one's there)."""
    step = plan(1_340_000_000, 335_000_000, BERT_LARGE, (1, 256), remat=True)
    state = step.weights_bytes + step.gradients_bytes + step.optimizer_bytes
    assert step.activations_bytes < step.gradients_bytes
    assert step.peak_bytes == state + step.gradients_bytes + step.runtime_bytes
