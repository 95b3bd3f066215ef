"""`bertfit tune`: a sweep of tiny runs resumes after a SIGKILL without re-running finished
trials; k-fold writes out-of-fold predictions for every row; one directory holds one sweep."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.errors import ConfigError
from bertfit.sweeps.spec import SweepSpec
from tests.tiny import sentiment_rows, train_args, write_csv

ROOT = Path(__file__).resolve().parents[2]


def _data(tmp_path: Path) -> tuple[Path, Path]:
    train = write_csv(tmp_path / "train.csv", sentiment_rows(32, seed=0))
    return train, write_csv(tmp_path / "eval.csv", sentiment_rows(12, seed=1))


def _files(run: Path) -> dict[str, int]:
    """Every file of a run directory with its modification time (ns)."""
    return {str(p.relative_to(run)): p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}


@pytest.mark.slow  # two processes' TensorFlow start and four tiny runs: ~40 s on 2 cores
def test_a_killed_sweep_resumes_without_rerunning_finished_trials(tmp_path, one_layer_hf_dir):
    train, evaluation = _data(tmp_path)
    sweep = tmp_path / "sweep"
    args = train_args(
        one_layer_hf_dir, train, sweep, "--learning-rate", "1e-3,5e-3", "--batch-size", "8,16",
        command="tune", eval=evaluation, buckets="16", strategy="default",
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "bertfit.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not list(sweep.glob("runs/t2-*/seed42")):  # the second trial started: the first is done
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stderr.close()
    first = next(sweep.glob("runs/t1-*/seed42"))
    assert json.loads((first / "metrics.json").read_text())["status"] == "finished"
    before = _files(first)

    assert main(args) == 0

    assert _files(first) == before  # the finished trial was not trained again, nor touched
    log = (sweep / "sweep.log").read_text()
    assert log.count(f"training {first.parent.name}/seed42") == 1
    results = json.loads((sweep / "results.json").read_text())
    assert [t["name"] for t in results["trials"]] == [
        "t1-lr0.001-bs8", "t2-lr0.001-bs16", "t3-lr0.005-bs8", "t4-lr0.005-bs16"
    ]  # fmt: skip
    for trial in results["trials"]:
        [run] = trial["runs"]
        assert run["status"] == "finished" and run["value"] is not None
        metrics = json.loads((Path(run["run_dir"]) / "metrics.json").read_text())
        assert run["value"] == metrics["best"]["accuracy"]
    chosen = max(results["trials"], key=lambda t: t["mean"])  # the first on a tie, as max
    assert results["chosen_trial"] == chosen["name"]
    assert results["chosen_run"] == chosen["runs"][0]["run_dir"]


@pytest.mark.slow  # two tiny runs traced and trained, two classifiers loaded: ~15 s on 2 cores
def test_two_folds_write_out_of_fold_predictions_for_every_row(tmp_path, one_layer_hf_dir):
    from bertfit.sweeps.report import write_sweep_report
    from bertfit.sweeps.tune import tune

    train, _ = _data(tmp_path)
    base = RunConfig(
        model=ModelConfig(name=str(one_layer_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(train=str(train), buckets=[16]),
        train=TrainConfig(batch_size=8, epochs=1, learning_rate=5e-3, seed=0, strategy="default"),
    )
    sweep = tmp_path / "cv"
    results = tune(base, SweepSpec({}, [0], folds=2), sweep, quiet=True, reports=False)

    [trial] = results.trials
    assert [(r.fold, r.status) for r in trial.runs] == [(1, "finished"), (2, "finished")]
    assert trial.mean == pytest.approx(np.mean([r.value for r in trial.runs]))
    rows = [
        json.loads(line) for line in (sweep / "runs/t1/oof-seed0.jsonl").read_text().splitlines()
    ]
    texts = [text for text, _ in sentiment_rows(32, seed=0)]
    assert [r["row"] for r in rows] == list(range(32))
    assert [r["text"] for r in rows] == texts
    folds = json.loads((sweep / "folds/folds.json").read_text())["fold_of_row"]
    assert [r["fold"] for r in rows] == folds and sorted(set(folds)) == [1, 2]
    for run in trial.runs:  # scored on the rows it held out, which it only predicted
        held_out = [r for r in rows if r["fold"] == run.fold]
        accuracy = np.mean([r["label"] == r["target"] for r in held_out])
        assert run.value == pytest.approx(accuracy)
        config = RunConfig.load(Path(run.run_dir) / "config.yaml")
        assert config.data.eval.endswith(f"fold-{run.fold}-valid.jsonl")  # it chose on these
        assert config.train.calibrate == "off"  # one scale for every fold's probabilities
    assert not list(sweep.rglob("report.html"))  # reports=False
    page = write_sweep_report(sweep).read_text()
    assert page.count("<img") == 1 and "learning rate was not swept" in page  # the spread only
    chosen = RunConfig.load(sweep / "chosen.yaml")
    assert chosen.data.train == str(train) and chosen.train.learning_rate == 5e-3
    assert chosen.model.pooling == "cls"  # what its runs decided: the checkpoint declares none


@pytest.mark.slow  # two tiny fold runs trained and predicted: ~15 s on 2 cores
def test_a_folds_predictions_do_not_see_the_labels_of_the_rows_it_holds_out(
    tmp_path, one_layer_hf_dir
):
    """The fold's run chooses its checkpoint and would calibrate on data: only on its own
    training part. Flipping every label of its held-out rows changes their score, and not one
    bit of their predicted probabilities."""
    from bertfit.sweeps.fold_data import split_training_rows
    from bertfit.sweeps.fold_predictions import HeldOut, predict_held_out
    from bertfit.training.run import train

    train_file, _ = _data(tmp_path)
    base = RunConfig(
        model=ModelConfig(name=str(one_layer_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(train=str(train_file), buckets=[16]),
        train=TrainConfig(
            batch_size=8,
            epochs=3,
            learning_rate=5e-3,
            seed=0,
            strategy="default",
            best_metric="loss",
            early_stopping_patience=1,
        ),  # fmt: skip
    )  # the best checkpoint, early stopping and --calibrate auto (the default) choose on data
    split = split_training_rows(base, 2, tmp_path / "folds")
    held_out = split.files(1)[-1]

    def predict_fold_one(sweep: str) -> dict:
        plans = SweepSpec({}, [0], folds=2).runs(base, tmp_path / sweep, split.files)
        train(plans[0].config, quiet=True)
        return predict_held_out([HeldOut(str(plans[0].path), str(held_out))])[0]

    before = predict_fold_one("a")
    flip = {"neg": "pos", "pos": "neg"}
    rows = [json.loads(line) for line in held_out.read_text().splitlines()]
    held_out.write_text("".join(json.dumps({**r, "label": flip[r["label"]]}) + "\n" for r in rows))
    after = predict_fold_one("b")

    assert after["predictions"] == before["predictions"]  # exactly
    assert after["metrics"]["accuracy"] == pytest.approx(1 - before["metrics"]["accuracy"])


def test_chosen_yaml_holds_the_pooling_the_chosen_trials_runs_decided(tmp_path):
    """A sweep left --pooling to the checkpoint: chosen.yaml says what its runs pooled with
    (their config.yaml), as a `train --config chosen.yaml` on another machine must (issue 56)."""
    from bertfit.sweeps.results import RunResult, SweepResults, TrialResult
    from bertfit.sweeps.tune import _chosen_config

    base = RunConfig(
        model=ModelConfig(name="minilm-l6"), data=DataConfig(train="t.csv", eval="e.csv")
    )
    run = tmp_path / "runs/t1-lr0.001/seed42"
    run.mkdir(parents=True)
    decided = dataclasses.replace(base, model=dataclasses.replace(base.model, pooling="mean"))
    decided.save(run / "config.yaml")
    runs = [RunResult(42, None, str(run), "finished", 0.8)]
    trial = TrialResult("t1-lr0.001", {"train.learning_rate": 1e-3}, runs)
    results = SweepResults("accuracy", [trial])
    chosen = _chosen_config(base, trial, results)
    assert chosen.model.pooling == "mean" and chosen.train.learning_rate == 1e-3
    given = dataclasses.replace(base, model=dataclasses.replace(base.model, pooling="cls"))
    assert _chosen_config(given, trial, results).model.pooling == "cls"


@pytest.mark.slow  # a JAX process's four tiny runs and a TensorFlow one's predictions: ~35 s
def test_a_jax_k_fold_sweep_trains_each_fold_on_jax_and_predicts_its_rows_in_tensorflow(
    tmp_path, one_layer_hf_dir
):
    """`bertfit tune --backend jax` trains its runs in its own process, on Keras' JAX backend;
    the out-of-fold file (what `bertfit audit` reads) is TensorFlow's prediction of each fold
    run's final weights, equal to the JAX run's own (on its validation slice: one epoch, so the
    best checkpoint is the final one)."""
    from bertfit.sweeps.fold_predictions import HeldOut, predict_held_out

    train, _ = _data(tmp_path)
    sweep = tmp_path / "cv"
    args = train_args(
        one_layer_hf_dir, train, sweep, command="tune", folds=2, seeds=1, backend="jax",
        buckets="16", dropout="0.0", learning_rate="5e-3", seed=0, json=True,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_BACKEND", None)  # the command sets it from --backend
    done = subprocess.run(
        [sys.executable, "-m", "bertfit.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["chosen_trial"] == "t1"

    results = json.loads((sweep / "results.json").read_text())
    [trial] = results["trials"]
    runs = trial["runs"]
    assert [(r["fold"], r["status"]) for r in runs] == [(1, "finished"), (2, "finished")]
    rows = [
        json.loads(line) for line in (sweep / "runs/t1/oof-seed0.jsonl").read_text().splitlines()
    ]
    assert [r["row"] for r in rows] == list(range(32))
    for run in runs:
        run_dir = Path(run["run_dir"])
        assert RunConfig.load(run_dir / "config.yaml").train.backend == "jax"
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["strategy"]["name"].startswith("jax ")
        # TensorFlow's prediction of the run's validation slice is the JAX run's evaluation
        valid = str(sweep / f"folds/fold-{run['fold']}-valid.jsonl")
        [tensorflow] = predict_held_out([HeldOut(str(run_dir), valid)])
        with np.load(run_dir / "eval_outputs.npz") as saved:
            np.testing.assert_allclose(
                [
                    [p["probabilities"]["neg"], p["probabilities"]["pos"]]
                    for p in tensorflow["predictions"]
                ],
                saved["outputs"],
                atol=1e-5,
            )
        held_out = [r for r in rows if r["fold"] == run["fold"]]
        assert run["value"] == pytest.approx(np.mean([r["label"] == r["target"] for r in held_out]))


def test_a_directory_holding_another_sweep_or_other_files_is_refused(tmp_path):
    from bertfit.sweeps.sweep_dir import SweepDir

    base = RunConfig(data=DataConfig(train="train.csv", eval="eval.csv"))
    first = SweepSpec({"train.learning_rate": [1e-5, 2e-5]}, [42])
    lock, _ = SweepDir(tmp_path / "s").claim(first, base)
    SweepDir(tmp_path / "s").record(first, base)
    lock.release()
    started = tmp_path / "s" / "runs" / "t1-lr1e-05" / "seed42"  # a run of it trained
    started.mkdir(parents=True)
    (started / "config.yaml").write_text("")
    other = SweepSpec({"train.learning_rate": [1e-5, 3e-5]}, [42])
    with pytest.raises(ConfigError, match="holds another sweep .*grid"):
        SweepDir(tmp_path / "s").claim(other, base)
    lock, _ = SweepDir(tmp_path / "s").claim(first, base)  # the same sweep: resumed
    lock.release()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("")
    with pytest.raises(ConfigError, match="not a bertfit sweep"):
        SweepDir(tmp_path / "run").claim(first, base)


def test_tune_refuses_a_sweep_it_could_not_score(tmp_path, capsys):
    train, evaluation = _data(tmp_path)
    args = train_args("tiny", train, tmp_path / "s", "--learning-rate", "1e-3,2e-3", command="tune")
    assert main(args) == 2
    assert "pass --eval FILE, or --folds K" in capsys.readouterr().err
    assert main([*args, "--folds", "2", "--eval", str(evaluation)]) == 2
    assert "--folds evaluates each fold on its held-out" in capsys.readouterr().err
    assert main([*args, "--eval", str(evaluation), "--epochs", "1,0"]) == 2  # every run checked
    assert "train.epochs (--epochs) must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_fold_runs_take_early_stopping_on_their_validation_slice(tmp_path):
    """--folds gives each run an --eval (a slice of its training part): early stopping needs
    no --eval of the user's there, and is refused without one when there are no folds."""
    from bertfit.cli import build_parser
    from bertfit.sweeps.flags import sweep_from_args

    train, _ = _data(tmp_path)
    argv = ["tune", "--train", str(train), "--output-dir", str(tmp_path / "s")]
    argv += ["--early-stopping-patience", "1"]
    base, spec = sweep_from_args(build_parser().parse_args([*argv, "--folds", "2"]))
    plans = spec.runs(base, tmp_path / "s", lambda k: (f"t{k}", f"v{k}", f"h{k}"))
    assert base.data.eval is None and [p.config.data.eval for p in plans] == ["v1", "v2"]
    assert all(p.config.train.early_stopping_patience == 1 for p in plans)
    with pytest.raises(ConfigError, match="given only with --eval FILE"):
        sweep_from_args(build_parser().parse_args(argv))


def test_a_lora_rank_the_models_hidden_size_cannot_hold_is_refused_before_the_sweep(
    tmp_path, one_layer_hf_dir, capsys
):
    """The tiny model's hidden vectors have 32 values: every layer LoRA adapts has 32 as a
    side, so rank 32 is refused from the checkpoint's config, as train would refuse it."""
    train, evaluation = _data(tmp_path)
    sweep = tmp_path / "s"
    args = train_args(
        one_layer_hf_dir, train, sweep, "--learning-rate", "1e-3,2e-3", command="tune",
        eval=evaluation, lora_rank=32,
    )  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "trial t1-lr0.001: --lora-rank 32: each layer it adapts reads or writes" in err
    assert "Pass a --lora-rank below 32" in err and "Nothing was trained" in err
    assert not sweep.exists()


def test_a_bad_grid_value_is_refused_before_any_trial_trains_and_the_fix_reuses_the_dir(
    tmp_path, one_layer_hf_dir, capsys
):
    train, evaluation = _data(tmp_path)
    sweep = tmp_path / "s"

    def tune(lengths: str) -> int:
        args = train_args(
            one_layer_hf_dir, train, sweep, "--max-seq-length", lengths, command="tune",
            eval=evaluation, buckets=None, strategy="default", epochs=1,
        )  # fmt: skip
        return main(args)

    assert tune("16,4096") == 2  # the tiny model has 64 positions
    err = capsys.readouterr().err
    assert "trial t2-len4096: max_seq_length 4096 is longer than" in err
    assert "Nothing was trained" in err and "Traceback" not in err
    assert not sweep.exists()

    # a sweep refused after it recorded itself, before any run trained (an old sweep.json)
    from bertfit.sweeps.sweep_dir import SweepDir

    base = RunConfig(data=DataConfig(train=str(train), eval=str(evaluation)))
    bad = SweepSpec({"model.max_seq_length": [16, 4096]}, [42])
    lock, _ = SweepDir(sweep).claim(bad, base)
    SweepDir(sweep).record(bad, base)
    lock.release()
    corrected = SweepSpec({"model.max_seq_length": [16, 32]}, [42])
    lock, _ = SweepDir(sweep).claim(corrected, base)  # no run trained: the directory is free
    lock.release()
    assert not (sweep / "sweep.json").exists()
