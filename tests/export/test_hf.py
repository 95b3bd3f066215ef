"""`--format hf`: transformers' own classes load the folder (no custom code), and their logits
give `bertfit predict`'s probabilities, or its values, within 1e-5; a run whose head no
transformers head computes is a sentence-transformers folder whose `encode` gives the same
logits; what neither holds is refused before anything is written."""

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
# (ModernBERT's, GTE's and NomicBERT's are sentence-transformers folders: `SENTENCE` below).
FAMILIES = (
    "bert",
    "albert",
    "roberta",
    "xlm-roberta",
    "deberta-v2",
    "mpnet",
    "electra",
    "distilbert",
    "eurobert",
)


def _module(
    task: Task,
    encoder=None,
    tokenizer=None,
    pooling: str = "cls",
    normalize_features: bool = False,
    **options,
) -> ClassifierModule:
    model = BertClassifier(
        encoder or tiny_encoder(),
        task.num_outputs,
        pooling,
        dropout=0.0,
        seed=1,
        normalize_features=normalize_features,
    )
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


def _family_module(family: str, folder, pooling: str = "cls") -> ClassifierModule:
    """A tiny `family` checkpoint's classifier whose head gives logits of a few units (a
    trained head's size, not the initialisation's hundredths)."""
    from bertfit.checkpoints.load import load_encoder

    write_family_checkpoint(family, folder, TEXTS)
    encoder, tokenizer = load_encoder(str(folder))
    task = Task("single-label", ("neg", "pos", "mid"), temperatures=(1.7,))
    model = BertClassifier(encoder, task.num_outputs, pooling, dropout=0.0, seed=1)
    kernel = np.random.default_rng(0).normal(0.0, 3.0, model.head.kernel.shape)
    model.head.kernel.assign(kernel.astype("float32"))
    model.head.bias.assign(np.array([0.5, -1.0, 2.0], "float32"))
    return ClassifierModule(model, tokenizer, task, 16, [8, 16])


def _assert_predicts(module: ClassifierModule, folder):
    """`module` exported to `folder`: transformers' logits are bertfit's calibrated ones, their
    softmax `bertfit predict`'s probabilities."""
    ids = module.tokenizer(TEXTS, max_seq_length=16, padding="longest")
    calibrated = module.model(ids, training=False).numpy() / module.task.temperatures[0]
    expected = module.classify_text(tf.constant(TEXTS))["probabilities"].numpy()

    model, logits = _export(module, folder)
    assert type(model).__name__.endswith("ForSequenceClassification")
    assert model.config.id2label == {0: "neg", 1: "pos", 2: "mid"}
    np.testing.assert_allclose(logits, calibrated, atol=1e-5)
    np.testing.assert_allclose(torch.tensor(logits).softmax(-1).numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_loads_in_transformers_and_gives_predicts_probabilities(family, tmp_path):
    _assert_predicts(_family_module(family, tmp_path / "checkpoint"), tmp_path / "hf")


def test_eurobert_mean_pooling_is_its_heads_classifier_pooling_mean(tmp_path):
    module = _family_module("eurobert", tmp_path / "checkpoint", pooling="mean")
    _assert_predicts(module, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["classifier_pooling"] == "mean"


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


@pytest.mark.parametrize("family", ["bert", "electra"])  # ELECTRA's: a `signed_head`
def test_multi_label_gives_sigmoid_probabilities_and_regression_the_value(family, tmp_path):
    config = dataclasses.replace(TINY_CONFIG, model_type=family, has_pooler=family == "bert")
    labels = ("a", "b", "c")
    multi = Task("multi-label", labels, temperatures=(0.5, 1.0, 3.0), thresholds=(0.3, 0.5, 0.7))
    module = _module(multi, tiny_encoder(config))
    model, logits = _export(module, tmp_path / "multi")
    expected = module.classify_text(tf.constant(TEXTS))["probabilities"].numpy()
    np.testing.assert_allclose(torch.tensor(logits).sigmoid().numpy(), expected, atol=1e-5)
    assert model.config.problem_type == "multi_label_classification"
    assert getattr(model.config, THRESHOLDS_KEY) == {"a": 0.3, "b": 0.5, "c": 0.7}
    assert model.config.label2id == {"a": 0, "b": 1, "c": 2}

    regression = Task("regression", mean=3.0, std=2.0)
    module = _module(regression, tiny_encoder(config))
    model, logits = _export(module, tmp_path / "regression")
    expected = module.classify_text(tf.constant(TEXTS))["value"].numpy()
    np.testing.assert_allclose(logits[:, 0], expected, atol=1e-5)
    assert model.config.problem_type == "regression"


def _encode(module: ClassifierModule, folder):
    """`module` exported to `folder`, a sentence-transformers folder, and `encode` of `TEXTS`
    by `SentenceTransformer` (no custom code), with the folder's config.json."""
    sentence_transformers = pytest.importorskip("sentence_transformers")

    export_hf(types.SimpleNamespace(module=module), folder)
    _, info = transformers.AutoModel.from_pretrained(folder, output_loading_info=True)
    assert not any(info.values()), info  # the base model: every tensor used, none missing
    model = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    assert model.max_seq_length == 16
    config = json.loads((folder / "config.json").read_text())
    return model.encode(TEXTS, convert_to_numpy=True), config


def _calibrated_logits(module: ClassifierModule) -> np.ndarray:
    ids = module.tokenizer(TEXTS, max_seq_length=16, padding="longest")
    return module.model(ids, training=False).numpy() / np.asarray(module.task.temperatures or 1.0)


def test_a_mean_pooled_run_is_a_sentence_transformers_folder_whose_encode_is_the_logits(
    tmp_path,
):  # 1.2 s
    task = Task("single-label", ("neg", "pos"), temperatures=(2.5,))
    module = _module(task, pooling="mean")
    logits, config = _encode(module, tmp_path / "hf")
    np.testing.assert_allclose(logits, _calibrated_logits(module), atol=1e-5)
    expected = module.classify_text(tf.constant(TEXTS))["probabilities"].numpy()
    np.testing.assert_allclose(torch.tensor(logits).softmax(-1).numpy(), expected, atol=1e-5)
    assert config["architectures"] == ["BertModel"]
    assert config["id2label"] == {"0": "neg", "1": "pos"}
    assert config["bertfit"]["flavour"] == "sentence-transformers"


def test_a_head_on_unit_features_is_a_folder_that_normalizes_before_it(tmp_path):  # 1.2 s
    task = Task("single-label", ("neg", "pos"), temperatures=(2.5,))
    module = _module(task, pooling="mean", normalize_features=True)  # a --few-shot run's
    kernel = np.random.default_rng(0).normal(0.0, 3.0, module.model.head.kernel.shape)
    module.model.head.kernel.assign(kernel.astype("float32"))  # logits of a few units
    logits, config = _encode(module, tmp_path / "hf")
    np.testing.assert_allclose(logits, _calibrated_logits(module), atol=1e-5)
    modules = json.loads((tmp_path / "hf" / "modules.json").read_text())
    assert [m["path"] for m in modules] == ["", "1_Pooling", "2_Normalize", "3_Dense"]
    assert config["bertfit"]["why"].startswith("its head reads the pooled vector divided by")


def test_bertfit_export_says_it_wrote_a_sentence_transformers_folder_and_why(
    tmp_path, monkeypatch, capsys
):  # 0.5 s
    from bertfit import cli
    from bertfit.inference import predictor

    module = _module(SINGLE, pooling="mean")
    monkeypatch.setattr(
        predictor, "load_classifier", lambda run: types.SimpleNamespace(module=module)
    )
    monkeypatch.setattr(cli, "warn_if_unfinished", lambda run: None)
    out = tmp_path / "hf"
    assert cli.main(["export", "--run", str(tmp_path / "run"), str(out), "--format", "hf"]) == 0
    printed = capsys.readouterr()
    assert printed.out == f"{out}\n"
    assert (
        "bertfit export: wrote a sentence-transformers folder (mean pooling: transformers' bert "
        "sequence-classification head pools [CLS]): SentenceTransformer(OUT).encode(texts) "
        "gives the calibrated logits"
    ) in printed.err


@pytest.mark.parametrize("family", ["modernbert", "gte", "nomic_bert"])
def test_families_whose_head_transformers_cannot_hold_are_sentence_transformers_folders(
    family, tmp_path
):  # 1.5-2.5 s each
    module = _family_module(family, tmp_path / "checkpoint")
    logits, config = _encode(module, tmp_path / "hf")
    np.testing.assert_allclose(logits, _calibrated_logits(module), atol=1e-5)
    assert config["model_type"] == family
    assert config["bertfit"]["why"].startswith(f"transformers' {family} sequence-classification")


def test_modernbert_mean_pooling_too(tmp_path):  # 2.4 s
    module = _family_module("modernbert", tmp_path / "checkpoint", pooling="mean")
    logits, _ = _encode(module, tmp_path / "hf")
    np.testing.assert_allclose(logits, _calibrated_logits(module), atol=1e-5)


def test_sentence_transformers_folders_of_multi_label_and_regression_runs(tmp_path):  # 1.5 s
    labels = ("a", "b", "c")
    multi = Task("multi-label", labels, temperatures=(0.5, 1.0, 3.0), thresholds=(0.3, 0.5, 0.7))
    module = _module(multi, pooling="mean")
    logits, config_json = _encode(module, tmp_path / "multi")
    expected = module.classify_text(tf.constant(TEXTS))["probabilities"].numpy()
    np.testing.assert_allclose(torch.tensor(logits).sigmoid().numpy(), expected, atol=1e-5)
    assert config_json["problem_type"] == "multi_label_classification"
    assert config_json[THRESHOLDS_KEY] == {"a": 0.3, "b": 0.5, "c": 0.7}
    modules = json.loads((tmp_path / "multi" / "modules.json").read_text())
    assert [m["path"] for m in modules] == ["", "1_Pooling", "2_Dense"]  # no Normalize

    regression = Task("regression", mean=3.0, std=2.0)
    module = _module(regression, pooling="mean")
    logits, config_json = _encode(module, tmp_path / "regression")
    expected = module.classify_text(tf.constant(TEXTS))["value"].numpy()
    np.testing.assert_allclose(logits[:, 0], expected, atol=1e-5)
    assert config_json["problem_type"] == "regression"


SINGLE = Task("single-label", ("neg", "pos"))


def _lora_module():
    from bertfit.model.lora import enable_lora

    module = _module(SINGLE)
    enable_lora(module.model, rank=2, alpha=4, targets=("auto",), seed=0)
    return module


def _family(model_type: str, num_classes: int = 2) -> ClassifierModule:
    """A tiny `model_type` classifier (no pooler, as the family's checkpoints)."""
    config = dataclasses.replace(TINY_CONFIG, model_type=model_type, has_pooler=False)
    task = Task("single-label", tuple(f"l{i}" for i in range(num_classes)))
    return _module(task, BertEncoder(config))


def _gte_with_ntk_scaling() -> ClassifierModule:
    config = dataclasses.replace(
        TINY_CONFIG, model_type="gte", has_pooler=False, variant={"ntk_factor": 2.0}
    )
    return _module(SINGLE, BertEncoder(config))


def test_more_outputs_than_a_signed_head_holds_are_a_sentence_transformers_folder(tmp_path):
    module = _family("electra", num_classes=17)  # ELECTRA's head: at most 32 / 2 outputs; 0.9 s
    logits, config = _encode(module, tmp_path / "hf")
    np.testing.assert_allclose(logits, _calibrated_logits(module), atol=1e-5)
    assert config["bertfit"]["why"].startswith("17 outputs: transformers' electra head")


REFUSED = {
    "text pairs, mean pooling": (
        lambda: _module(SINGLE, pooling="mean", pairs=True),
        "cannot hold this text-pair model: mean pooling: transformers' bert "
        "sequence-classification head pools \\[CLS\\], and the sentence-transformers folder",
    ),
    "windows": (
        lambda: _module(SINGLE, windows=WindowSpec(16, 8, 4)),
        "does not take a --long-documents chunk model",
    ),
    "lora": (_lora_module, "unmerged LoRA adapters or int8 kernels. Load the run with"),
    "a pooler the base model has not": (  # ELECTRA's head has no pooler, nor its base model
        lambda: _module(
            SINGLE,
            tiny_encoder(dataclasses.replace(TINY_CONFIG, model_type="electra")),
        ),
        "electra model: this model's \\[CLS\\] goes through a pooler .* and the family's base "
        "model .* has no pooler either",
    ),
    "gte with ntk scaling": (
        _gte_with_ntk_scaling,
        "cannot hold this gte model: its \\{'ntk_factor': 2.0\\} are not in transformers'",
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
