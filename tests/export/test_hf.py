"""`--format hf`: transformers' own classes load the folder (no custom code), and their logits
give `bertfit predict`'s probabilities, or its values, within 1e-5; what transformers' heads
cannot compute is refused before anything is written."""

from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest
import tensorflow as tf

from bertfit.data.tasks import Task
from bertfit.errors import ConfigError
from bertfit.export.hf import THRESHOLDS_KEY, export_hf
from bertfit.inference.graph import ClassifierModule
from bertfit.model.classifier import BertClassifier
from bertfit.model.encoder import BertEncoder
from bertfit.text.tokenizer import BertTokenizer
from bertfit.text.windows import WindowSpec
from tests.families import write_family_checkpoint
from tests.tiny import TINY_CONFIG, TINY_VOCAB, sentiment_rows, tiny_encoder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = [text for text, _ in sentiment_rows(12, seed=5)] + ["", "good " * 30]
# bertfit's families that transformers has a head for which computes bertfit's head exactly
# (the others are refused: `test_a_family_whose_transformers_head_differs_is_refused`).
FAMILIES = ("bert", "albert", "roberta", "xlm-roberta", "deberta-v2")


def _module(task: Task, encoder=None, tokenizer=None, **options) -> ClassifierModule:
    model = BertClassifier(encoder or tiny_encoder(), task.num_outputs, dropout=0.0, seed=1)
    tokenizer = tokenizer or BertTokenizer(TINY_VOCAB)
    return ClassifierModule(model, tokenizer, task, 16, [8, 16], **options)


def _export(module: ClassifierModule, folder):
    """`folder` exported and loaded back by transformers' Auto classes, with its logits of
    `TEXTS`."""
    export_hf(types.SimpleNamespace(module=module), folder)
    model, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, output_loading_info=True
    )
    assert not any(info.values()), info  # every tensor used, none missing or mismatched
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        encoded = tokenizer(TEXTS, padding=True, truncation=True, return_tensors="pt")
        logits = model.eval()(**encoded).logits.numpy()
    return model, logits


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_loads_in_transformers_and_gives_predicts_probabilities(family, tmp_path):
    from bertfit.checkpoints.load import load_encoder

    write_family_checkpoint(family, tmp_path / "checkpoint", TEXTS)
    encoder, tokenizer = load_encoder(str(tmp_path / "checkpoint"))
    task = Task("single-label", ("neg", "pos", "mid"), temperatures=(1.7,))
    module = _module(task, encoder, tokenizer)
    expected = module.classify_text(tf.constant(TEXTS))["probabilities"].numpy()

    model, logits = _export(module, tmp_path / "hf")
    assert type(model).__name__.endswith("ForSequenceClassification")
    assert model.config.id2label == {0: "neg", 1: "pos", 2: "mid"}
    np.testing.assert_allclose(torch.tensor(logits).softmax(-1).numpy(), expected, atol=1e-5)


def test_the_temperature_divides_the_head_so_the_logits_are_the_calibrated_ones(tmp_path):
    task = Task("single-label", ("neg", "pos"), temperatures=(2.5,))
    module = _module(task)
    ids = module.tokenizer(TEXTS, max_seq_length=16, padding="longest")
    raw = module.model(ids, training=False).numpy()

    model, logits = _export(module, tmp_path / "hf")
    np.testing.assert_allclose(logits, raw / 2.5, atol=1e-5)
    assert model.config.problem_type == "single_label_classification"
    expected = module.classify_text(tf.constant(TEXTS))["probabilities"].numpy()
    np.testing.assert_allclose(torch.tensor(logits).softmax(-1).numpy(), expected, atol=1e-5)


def test_multi_label_gives_sigmoid_probabilities_and_regression_the_value(tmp_path):
    labels = ("a", "b", "c")
    multi = Task("multi-label", labels, temperatures=(0.5, 1.0, 3.0), thresholds=(0.3, 0.5, 0.7))
    module = _module(multi)
    model, logits = _export(module, tmp_path / "multi")
    expected = module.classify_text(tf.constant(TEXTS))["probabilities"].numpy()
    np.testing.assert_allclose(torch.tensor(logits).sigmoid().numpy(), expected, atol=1e-5)
    assert model.config.problem_type == "multi_label_classification"
    assert getattr(model.config, THRESHOLDS_KEY) == {"a": 0.3, "b": 0.5, "c": 0.7}
    assert model.config.label2id == {"a": 0, "b": 1, "c": 2}

    regression = Task("regression", mean=3.0, std=2.0)
    module = _module(regression)
    model, logits = _export(module, tmp_path / "regression")
    expected = module.classify_text(tf.constant(TEXTS))["value"].numpy()
    np.testing.assert_allclose(logits[:, 0], expected, atol=1e-5)
    assert model.config.problem_type == "regression"


SINGLE = Task("single-label", ("neg", "pos"))


def _lora_module():
    from bertfit.model.lora import enable_lora

    module = _module(SINGLE)
    enable_lora(module.model, rank=2, alpha=4, targets=("auto",), seed=0)
    return module


REFUSED = {
    "mean pooling": (
        lambda: ClassifierModule(
            BertClassifier(tiny_encoder(), 2, pooling="mean"),
            BertTokenizer(TINY_VOCAB),
            SINGLE,
            16,
            [16],
        ),
        "--pooling mean: transformers' sequence-classification heads pool \\[CLS\\]",
    ),
    "windows": (
        lambda: _module(SINGLE, windows=WindowSpec(16, 8, 4)),
        "does not take a --long-documents chunk model",
    ),
    "lora": (_lora_module, "unmerged LoRA adapters or int8 kernels. Load the run with"),
    "electra": (
        lambda: _module(
            SINGLE,
            BertEncoder(dataclasses.replace(TINY_CONFIG, model_type="electra", has_pooler=False)),
        ),
        "this electra model: .* puts a dense layer and GELU between \\[CLS\\] and the classifier",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_transformers_heads_cannot_compute_is_refused_before_writing(case, tmp_path):
    build, message = REFUSED[case]
    with pytest.raises(ConfigError, match=message):
        export_hf(types.SimpleNamespace(module=build()), tmp_path / "out" / "hf")
    assert not (tmp_path / "out").exists()


def test_a_folder_with_files_in_it_is_refused_and_kept(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not an empty folder"):
        export_hf(types.SimpleNamespace(module=_module(SINGLE)), tmp_path / "hf")
    assert [p.name for p in (tmp_path / "hf").iterdir()] == ["notes.txt"]
    written = export_hf(types.SimpleNamespace(module=_module(SINGLE)), tmp_path / "empty")
    config = json.loads((written / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "hf"]  # no temporary left


@pytest.mark.slow  # the shared tiny training run (when no other test has made it yet)
def test_bertfit_export_format_hf_of_a_run_gives_what_bertfit_predict_gives(trained_run, tmp_path):
    from bertfit.cli import main
    from bertfit.inference.predictor import load_classifier

    _, summary = trained_run
    out = tmp_path / "hf"
    assert main(["export", "--run", str(summary.run_dir), str(out), "--format", "hf"]) == 0
    expected = load_classifier(summary.run_dir).outputs(TEXTS)["probabilities"]
    model = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        logits = model(**tokenizer(TEXTS, padding=True, truncation=True, return_tensors="pt"))
    np.testing.assert_allclose(logits.logits.softmax(-1).numpy(), expected, atol=1e-5)
    assert main(["export", "--run", str(summary.run_dir), str(out), "--format", "hf"]) == 2
    assert (
        main(
            [
                "export",
                "--run",
                str(summary.run_dir),
                str(tmp_path / "v"),
                "--format",
                "hf",
                "--version",
                "2",
            ]
        )
        == 2
    )
