"""`bertfit train --few-shot`: a contrastive stage on pairs of training rows, then an ordinary
run that exports what it predicts."""

from __future__ import annotations

import dataclasses
import itertools
import json
import types

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.tasks import Task
from bertfit.errors import ConfigError
from bertfit.training.backends import backend_of
from bertfit.training.few_shot import few_shot_suggestion
from tests.tiny import scored_rows, sentiment_rows, train_args, write_csv


@pytest.mark.slow  # the acceptance test in miniature: 16-20 s on 2 busy cores
def test_a_few_shot_run_on_16_rows_a_class_exports_what_it_predicts(
    one_layer_hf_dir, tmp_path, capsys
):
    import tensorflow as tf

    from bertfit.inference.predictor import load_classifier

    train = write_csv(tmp_path / "train.csv", sentiment_rows(32, seed=0))
    evaluation = write_csv(tmp_path / "eval.csv", sentiment_rows(8, seed=1))
    run = tmp_path / "run"
    args = train_args(one_layer_hf_dir, train, run, "--few-shot", "--few-shot-epochs", "2")
    assert main([*args, "--eval", str(evaluation), "--learning-rate", "5e-3"]) == 0
    first_line = capsys.readouterr().err.splitlines()[0]
    assert first_line.startswith(
        "bertfit: few-shot: stage 1 fine-tunes the encoder on every pair of rows within "
        "batches of 8 training rows (28 pairs a batch), 2 passes over the rows"
    )
    metrics = json.loads((run / "metrics.json").read_text())
    stage = metrics["few_shot"]  # 2 passes over 32 rows in batches of 8
    assert (stage["pairs"], stage["steps"], stage["batch_size"]) == (8 * 28, 8, 8)
    assert metrics["time"]["few_shot"] == stage["seconds"]  # not in "other"

    assert stage["head"]["converged"]  # the head fitted before stage 2, then trained alone
    assert load_classifier(str(run)).module.model.normalize_features  # saved in config.yaml

    assert main(["export", "--run", str(run), str(tmp_path / "export")]) == 0
    texts = [text for text, _ in sentiment_rows(12, seed=5)]
    serve = tf.saved_model.load(str(tmp_path / "export" / "1")).signatures["serving_default"]
    exported = serve(text=tf.constant(texts))["probabilities"].numpy()
    predicted = [row["probabilities"] for row in load_classifier(str(run)).predict(texts)]
    np.testing.assert_allclose(exported, [[p["neg"], p["pos"]] for p in predicted], atol=1e-5)


def test_a_regression_is_refused_before_the_run_directory_is_written(
    one_layer_hf_dir, tmp_path, capsys
):
    train = write_csv(tmp_path / "train.csv", scored_rows(16))
    run = tmp_path / "run"
    assert main(train_args(one_layer_hf_dir, train, run, "--few-shot")) == 2
    err = capsys.readouterr().err
    assert "--few-shot pairs rows by their labels; a regression has none" in err
    assert "Traceback" not in err and not run.exists()


@pytest.mark.parametrize(
    "config, flag",
    [
        (RunConfig(train=TrainConfig(few_shot_epochs=5)), "--few-shot-epochs"),
        (RunConfig(train=TrainConfig(few_shot=True, few_shot_epochs=0)), "--few-shot-epochs"),
        (
            RunConfig(data=DataConfig(streaming=True), train=TrainConfig(few_shot=True)),
            "--few-shot",
        ),
    ],
)
def test_settings_stage_1_cannot_take_are_refused(config, flag):
    with pytest.raises(ConfigError, match=f"\\({flag}\\)"):
        config.validate()


def test_a_run_saved_when_stage_1_listed_its_pairs_still_reads():
    saved = RunConfig(train=TrainConfig(few_shot=True)).to_dict()
    del saved["train"]["few_shot_epochs"]
    saved["train"]["few_shot_pairs"] = 20  # config.yaml before stage 1 paired within batches
    read = RunConfig.from_dict(saved)
    assert read.train.few_shot and read.train.few_shot_epochs == TrainConfig().few_shot_epochs


def test_a_run_saved_when_stage_1_took_20_passes_by_default_still_reads():
    saved = RunConfig().to_dict()
    saved["train"]["few_shot_epochs"] = 20  # every config.yaml before the default became 10
    read = RunConfig.from_dict(saved).validate()
    assert read.train.few_shot_epochs == TrainConfig().few_shot_epochs
    saved["train"]["few_shot"] = True  # a few-shot run keeps the passes it trained
    assert RunConfig.from_dict(saved).train.few_shot_epochs == 20


def test_its_head_reads_unit_embeddings_unless_told_otherwise():
    from bertfit.training.setup import decide_normalize_features

    assert decide_normalize_features(RunConfig(train=TrainConfig(few_shot=True))) is True
    assert decide_normalize_features(RunConfig()) is False
    told = RunConfig(model=ModelConfig(normalize_features=False), train=TrainConfig(few_shot=True))
    assert decide_normalize_features(told) is False


def test_a_resumed_run_reads_its_features_as_it_started():
    from bertfit.training.run_dir import with_saved_decisions

    command = RunConfig(train=TrainConfig(few_shot=True))  # no --normalize-features

    def saved(normalize):
        return RunConfig(model=ModelConfig(normalize_features=normalize))

    assert with_saved_decisions(saved(True), command).model.normalize_features is True
    assert with_saved_decisions(saved(False), command).model.normalize_features is False


def _weighted_pairs(rows, weights) -> dict:
    return {
        frozenset((a, b)): w
        for (i, a), (j, b) in itertools.product(enumerate(rows), repeat=2)
        if (w := weights[i, j]) > 0
    }


@pytest.mark.parametrize("any_length", [True, False])
def test_a_batch_is_encoded_in_parts_of_like_length_unless_xla_compiles_the_step(any_length):
    from bertfit.data.pairs import pair_weights, similarity
    from bertfit.training.few_shot import FewShotPlan

    lengths = np.array([5, 40, 7, 9, 12, 6, 30, 3] * 2)  # packed, before --max-seq-length
    train = types.SimpleNamespace(labels=np.arange(16) % 3, lengths=lambda: lengths)
    config = RunConfig(
        model=ModelConfig(max_seq_length=32),
        train=TrainConfig(few_shot=True, few_shot_epochs=1, batch_size=16),
    )
    plan = FewShotPlan.of(config, train, any_length=any_length)
    parts, alike, weights = plan.batch(0)
    shuffled = plan.batches[0]
    if any_length:  # sorted: 3, 3, 5, 5, 6, 6 | 7, 7, 9, 9, 12 | 12, 30, 30, 32, 32
        assert [(len(p), plan.length_of(p)) for p in parts] == [(6, 6), (5, 12), (5, 32)]
    else:  # one shape, for XLA
        assert len(parts) == 1 and np.array_equal(parts[0], shuffled)
        assert plan.length_of(parts[0]) == 32
    assert plan.any_length == any_length
    rows = np.concatenate(parts)  # the same pairs of rows, weighted the same
    assert np.array_equal(alike, similarity(train.labels[rows]))
    shuffled_weights = pair_weights(shuffled, similarity(train.labels[shuffled]))
    assert _weighted_pairs(rows, weights) == _weighted_pairs(shuffled, shuffled_weights)


def test_a_batch_too_small_to_part_keeps_one_shape():
    from bertfit.training.few_shot import ROWS_A_PART, FewShotPlan

    train = types.SimpleNamespace(labels=np.arange(16) % 2, lengths=lambda: np.arange(16) + 3)
    config = RunConfig(
        model=ModelConfig(max_seq_length=32),
        train=TrainConfig(few_shot=True, batch_size=ROWS_A_PART + 2),
    )
    plan = FewShotPlan.of(config, train, any_length=True)
    assert not plan.any_length and all(len(plan.parts(rows)) == 1 for rows in plan.batches)
    assert {plan.length_of(rows) for rows in plan.batches} == {18}


def test_train_suggests_it_for_16_rows_a_class_or_fewer():
    task = Task(kind="single-label", labels=("neg", "pos"))
    assert "--few-shot may score better" in few_shot_suggestion(task, 32)
    assert few_shot_suggestion(task, 33) is None
    assert few_shot_suggestion(Task(kind="regression", labels=()), 8) is None


@pytest.mark.slow  # 4-6 s on 2 busy cores: the run's setup, then 4 steps
def test_stage_1_trains_the_encoder_then_fits_the_head_to_its_unit_features(
    one_layer_hf_dir, tmp_path
):
    from bertfit.data.host_input import HostInput
    from bertfit.progress import Console
    from bertfit.training.few_shot import train_on_pairs
    from bertfit.training.head_fit import fit_linear_head
    from bertfit.training.setup import prepare

    train = write_csv(tmp_path / "train.csv", sentiment_rows(8, seed=0))
    config = RunConfig(
        model=ModelConfig(name=str(one_layer_hf_dir), max_seq_length=16),
        data=DataConfig(train=str(train)),
        train=TrainConfig(few_shot=True, few_shot_epochs=4, batch_size=4, learning_rate=5e-3),
    )
    config.validate()
    backend = backend_of(config)
    setup = prepare(config, *backend.placement(config))
    model = setup.trainer.model
    head, word = (v.numpy() for v in (model.head.kernel, model.encoder.weights[0]))
    # stage 2, the run's own steps, trains the head alone
    assert {id(v) for v in setup.trainer.variables} == {id(model.head.kernel), id(model.head.bias)}
    no_stop = types.SimpleNamespace(signal=None)
    record = train_on_pairs(setup, setup.few_shot, backend, Console(quiet=True), no_stop)
    assert (record["pairs"], record["steps"]) == (8 * 6, 8)  # 4 passes over 8 rows, 4 a batch
    assert not np.array_equal(model.encoder.weights[0].numpy(), word)
    # The head: the logistic regression on the tuned encoder's features, each of length 1.
    encoded = HostInput(setup.train.encoded, None, [], special_ids=setup.tokenizer.special_ids)
    features = model.features(encoded.inputs(np.arange(8), setup.few_shot.seq_length)).numpy()
    np.testing.assert_allclose(np.linalg.norm(features, axis=1), 1.0, rtol=1e-5)
    fit = fit_linear_head(features, setup.train.labels, classes=2)
    assert (record["head"]["solver_steps"], record["head"]["converged"]) == (fit.steps, True)
    assert not np.array_equal(model.head.kernel.numpy(), head)
    np.testing.assert_allclose(model.head.kernel.numpy(), fit.kernel, atol=1e-5)
    np.testing.assert_allclose(model.head.bias.numpy(), fit.bias, atol=1e-5)


def _stage(tmp_path, monkeypatch, *, global_step: int, signal: int | None):
    """`_few_shot_stage` on a run directory whose metrics.json holds a stage's record, at
    `global_step`, with `signal` received during stage 1 (whose training is faked): the
    summary, the record and how often stage 1 trained."""
    from bertfit.progress import Console
    from bertfit.runs.records import RunSummary
    from bertfit.training import run
    from bertfit.training.checkpointing import TrainingState
    from bertfit.training.run_dir import TrainingRunDir

    record = {"pairs": 8, "steps": 1, "seconds": 0.1, "first_loss": 0.5, "last_loss": 0.4}
    record["head"] = {"solver_steps": 30, "converged": True}
    trained = []
    monkeypatch.setattr(run, "train_on_pairs", lambda *_: trained.append(1) or record)
    run_dir = TrainingRunDir(tmp_path)
    summary = RunSummary("running", "single-label", ["a", "b"], {}, {}, {})
    run_dir.save_metrics(dataclasses.replace(summary, few_shot=record))
    plan = types.SimpleNamespace(steps=4)
    setup = types.SimpleNamespace(config=RunConfig(), few_shot=plan, seconds={})
    state = TrainingState(global_step=global_step)
    stop = types.SimpleNamespace(signal=signal)
    summary = run._few_shot_stage(setup, run_dir, summary, state, Console(quiet=True), stop)
    return summary, record, len(trained)


def test_a_run_resumed_from_a_checkpoint_keeps_its_stage_and_does_not_repeat_it(
    tmp_path, monkeypatch
):
    summary, record, trained = _stage(tmp_path, monkeypatch, global_step=3, signal=None)
    assert summary.few_shot == record and trained == 0


def test_a_stop_during_stage_1_says_the_same_command_starts_the_run_over(tmp_path, monkeypatch):
    import signal

    from bertfit.errors import TrainingInterrupted

    with pytest.raises(TrainingInterrupted, match="step 1 of 4.*run the same command again"):
        _stage(tmp_path, monkeypatch, global_step=0, signal=signal.SIGTERM)


def test_a_fresh_run_trains_its_stage_and_records_it(tmp_path, monkeypatch):
    summary, record, trained = _stage(tmp_path, monkeypatch, global_step=0, signal=None)
    assert trained == 1 and summary.few_shot == record
    logged = (tmp_path / "train.log").read_text()
    assert "few-shot stage 1: 1 steps on 8 pairs" in logged
    assert "then the head fitted to its features (logistic regression, 30 solver steps)" in logged


@pytest.mark.slow  # a JAX process and a TensorFlow stage: 25-30 s on 2 busy cores
def test_stage_1_on_jax_takes_the_steps_it_takes_on_tensorflow(trainable_hf_dir, tmp_path):
    from tests.jax_process import run_in_jax
    from tests.training.few_shot_steps import stage_1

    train = str(write_csv(tmp_path / "train.csv", sentiment_rows(32, seed=0)))
    tensorflow = stage_1(str(trainable_hf_dir), train, "tensorflow")
    jax = json.loads(run_in_jax(["tests.training.few_shot_steps", trainable_hf_dir, train]))
    assert jax["steps"] == tensorflow["steps"] == 8
    for name in ("first_loss", "last_loss"):
        np.testing.assert_allclose(jax[name], tensorflow[name], atol=1e-4, err_msg=name)
    # The same steps though TensorFlow encodes each batch in parts of like length and JAX
    # whole. Each variable's sum of |w|, relative: the two backends' CPU kernels sum in other
    # orders, and Adam turns a near-zero gradient's last digits into a whole step (on an
    # AVX-512 EPYC a bias's 0.929 against 0.929 + 2.3e-4 after 8 steps; the losses above agree
    # within 1e-4).
    np.testing.assert_allclose(jax["sums"], tensorflow["sums"], rtol=1e-3, atol=1e-4)


def test_rows_streamed_or_split_over_devices_are_refused():
    from bertfit.data.training_data import LabelledData
    from bertfit.training.few_shot import check_few_shot

    config, task = (
        RunConfig(data=DataConfig(train="set.prepared")),
        Task("single-label", ("a", "b")),
    )
    with pytest.raises(ConfigError, match="set.prepared is a prepared set"):
        check_few_shot(config, task, object(), replicas=1)
    rows = LabelledData("train.csv", [], np.array([0, 1]), None)
    with pytest.raises(ConfigError, match="splits its batches over 2: leave --cpu-replicas out"):
        check_few_shot(config, task, rows, replicas=2)
    check_few_shot(config, task, rows, replicas=1)
