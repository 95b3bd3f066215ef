"""Early stopping (`--early-stopping-patience`, `--early-stopping-min-delta`) and evaluations
inside epochs (`--eval-every-steps`): where a run evaluates, where it stops, which weights
`checkpoints/best` keeps, what metrics.json, train.log and TensorBoard say, and that a run
stopped and resumed evaluates and stops exactly where an uninterrupted one does.

Most tests script the watched metric: `scripted_accuracy` keeps the real evaluation (every
example predicted, outputs saved) and replaces its accuracy by the value scripted for the
global step it was taken at, so the sequence of values is known in advance.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import tensorflow as tf

from bertfit.cli import main
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.errors import ConfigError, TrainingInterrupted
from bertfit.runs.checkpoint_files import checkpoint_step, latest_checkpoint
from bertfit.training import run as run_module
from bertfit.training.run import train
from tests.distributed import cluster
from tests.tiny import sentiment_rows, train_args, write_csv
from tests.training.kill import run_killed, train_here

STEPS_PER_EPOCH = 4  # 32 training rows, batch 8, one bucket


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("early_stopping_data")
    train_file = write_csv(folder / "train.csv", sentiment_rows(32, seed=5))
    dev_file = write_csv(folder / "dev.csv", sentiment_rows(16, seed=6))
    return str(train_file), str(dev_file)


def _config(model, data, output: Path, **train) -> RunConfig:
    train_file, dev_file = data
    return RunConfig(
        output_dir=str(output),
        model=ModelConfig(name=str(model), max_seq_length=16, dropout=0.0),
        data=DataConfig(train=train_file, eval=dev_file, buckets=[16]),
        train=TrainConfig(batch_size=8, learning_rate=1e-3, jit_compile=False, **train),
    )


class ScriptedAccuracy:
    """Replaces `evaluate_data`'s accuracy by `values[global step]`; records the global steps
    evaluated at (read from steps.jsonl, written before each evaluation)."""

    def __init__(self, values: dict[int, float]):
        self.values, self.steps = values, []

    def install(self, monkeypatch, real=run_module.evaluate_data) -> None:
        def evaluate_data(setup, data, console, title="eval"):
            metrics, outputs = real(setup, data, console, title)
            steps = Path(setup.config.output_dir, "steps.jsonl").read_text().splitlines()
            global_step = json.loads(steps[-1])["global_step"]
            self.steps.append(global_step)
            metrics["accuracy"] = self.values[global_step]
            return metrics, outputs

        monkeypatch.setattr(run_module, "evaluate_data", evaluate_data)


def _best_checkpoint_step(run: Path) -> int:
    return checkpoint_step(latest_checkpoint(run / "checkpoints" / "best"))


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.mark.slow  # trains a tiny model (seconds)
@pytest.mark.parametrize(
    "accuracies, min_delta, stopped_after, best_epoch",
    [
        # 3 and 4 do not beat 0.7: two evaluations without an improvement
        ([0.5, 0.7, 0.69, 0.7, 0.9], 0.0, 4, 2),
        # 3 and 4 are best (the checkpoint follows them) but improve by 0.005 < min_delta
        ([0.5, 0.7, 0.705, 0.71, 0.9], 0.01, 4, 4),
        # beyond min_delta, 3 resets the count 2 started; 5 exhausts it, but ends the run anyway
        ([0.5, 0.5, 0.75, 0.7, 0.7], 0.01, 5, 3),
    ],
)
def test_early_stopping_stops_after_patience_evaluations_and_keeps_the_best_epoch(
    tmp_path, one_layer_hf_dir, data, monkeypatch, accuracies, min_delta, stopped_after, best_epoch
):
    script = ScriptedAccuracy(
        {STEPS_PER_EPOCH * (i + 1): value for i, value in enumerate(accuracies)}
    )
    script.install(monkeypatch)
    run = tmp_path / "run"
    config = _config(
        one_layer_hf_dir,
        data,
        run,
        epochs=len(accuracies),
        early_stopping_patience=2,
        early_stopping_min_delta=min_delta,
    )
    summary = train(config, quiet=True)

    stopped_early = stopped_after < len(accuracies)
    assert [r.epoch for r in summary.epochs] == list(range(1, stopped_after + 1))
    assert summary.status == "finished"
    assert _best_checkpoint_step(run) == STEPS_PER_EPOCH * best_epoch
    assert summary.best == {"accuracy": accuracies[best_epoch - 1]}
    assert [r.epoch for r in summary.epochs if r.best][-1] == best_epoch
    metrics = _metrics(run)
    assert "evaluations" not in metrics  # no --eval-every-steps
    assert len((run / "steps.jsonl").read_text().splitlines()) == STEPS_PER_EPOCH * stopped_after
    if not stopped_early:  # the last epoch's evaluation ends the run anyway
        assert "stopped_early" not in metrics
        return
    assert metrics["stopped_early"] == {
        "epoch": stopped_after,
        "step": STEPS_PER_EPOCH,
        "global_step": STEPS_PER_EPOCH * stopped_after,
        "best_metric": "accuracy",
        "best_value": accuracies[best_epoch - 1],
        "patience": 2,
        "min_delta": min_delta,
    }
    assert all("stopped_after_steps" not in r for r in metrics["epochs"])  # at an epoch's end
    log = (run / "train.log").read_text()
    assert f"stopped early at epoch {stopped_after}, step {STEPS_PER_EPOCH}" in log
    assert "did not improve accuracy by more than" in log


def _event_steps(run: Path, tag: str) -> list[int]:
    steps = []
    for file in sorted((run / "tensorboard").glob("events.*")):
        for event in tf.compat.v1.train.summary_iterator(str(file)):
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return steps


@pytest.mark.slow  # trains a tiny model (seconds)
def test_eval_every_steps_evaluates_at_its_steps_and_keeps_a_mid_epoch_best(
    tmp_path, one_layer_hf_dir, data, monkeypatch
):
    # 4 steps per epoch, every 3 steps: 3, 6 and 9 inside epochs; 12 is epoch 3's own
    values = {3: 0.5, 4: 0.6, 6: 0.9, 8: 0.7, 9: 0.8, 12: 0.85}
    script = ScriptedAccuracy(values)
    script.install(monkeypatch)
    run = tmp_path / "run"
    # with 2 steps per host call the calls end at the evaluation steps too
    config = _config(
        one_layer_hf_dir, data, run, epochs=3, eval_every_steps=3, steps_per_execution=2
    )
    summary = train(config, quiet=True)

    assert script.steps == [3, 4, 6, 8, 9, 12]
    metrics = _metrics(run)
    evaluations = metrics["evaluations"]
    assert [(e["epoch"], e["step"], e["global_step"]) for e in evaluations] == [
        (1, 3, 3),
        (2, 2, 6),
        (3, 1, 9),
    ]
    assert [e["best"] for e in evaluations] == [True, True, False]
    assert [e["metrics"]["accuracy"] for e in evaluations] == [0.5, 0.9, 0.8]
    assert all(e["metrics"]["num_examples"] == 16 for e in evaluations)
    assert [r.best for r in summary.epochs] == [True, False, False]
    assert _best_checkpoint_step(run) == 6  # the mid-epoch best, not an epoch's
    assert summary.best == {"accuracy": 0.9} and summary.final["accuracy"] == 0.85
    assert "stopped_early" not in metrics and metrics["status"] == "finished"
    assert _event_steps(run, "eval/accuracy") == [3, 4, 6, 8, 9, 12]
    assert "evaluation at epoch 2, step 2 (global step 6)" in (run / "train.log").read_text()
    # the evaluations' time is counted once, as evaluation
    seconds = sum(r["eval"]["wall_seconds"] for r in metrics["epochs"])
    seconds += sum(e["metrics"]["wall_seconds"] for e in evaluations)
    assert metrics["time"]["eval"] <= seconds + 1e-6


@pytest.mark.slow  # trains a tiny model (seconds)
def test_a_step_evaluation_can_stop_the_run_inside_an_epoch(
    tmp_path, one_layer_hf_dir, data, monkeypatch
):
    # best 0.9 at step 6; 8 (epoch 2's end) and 9 do not beat it: stop at step 9
    ScriptedAccuracy({3: 0.5, 4: 0.6, 6: 0.9, 8: 0.7, 9: 0.8}).install(monkeypatch)
    run = tmp_path / "run"
    config = _config(
        one_layer_hf_dir, data, run, epochs=3, eval_every_steps=3, early_stopping_patience=2
    )
    summary = train(config, quiet=True)

    metrics = _metrics(run)
    assert metrics["status"] == "finished"
    assert metrics["stopped_early"] == {
        "epoch": 3,
        "step": 1,
        "global_step": 9,
        "best_metric": "accuracy",
        "best_value": 0.9,
        "patience": 2,
        "min_delta": 0.0,
    }
    assert len((run / "steps.jsonl").read_text().splitlines()) == 9  # no step after it
    last = metrics["epochs"][-1]
    assert (last["epoch"], last["stopped_after_steps"]) == (3, 1)
    assert last["eval"] == metrics["evaluations"][-1]["metrics"] == metrics["final"]
    assert last["train_examples"] == 8
    assert _best_checkpoint_step(run) == 6
    assert summary.epoch_table().splitlines()[-2].endswith("stopped early")
    assert summary.epoch_table().splitlines()[-1].startswith("stopped early at epoch 3, step 1")
    assert _event_steps(run, "run/stopped_early") == [9]


@pytest.mark.slow  # trains a tiny model (seconds)
def test_stopped_and_resumed_it_evaluates_and_stops_where_an_uninterrupted_run_does(
    tmp_path, one_layer_hf_dir, data, monkeypatch
):
    values = {3: 0.5, 4: 0.6, 6: 0.9, 8: 0.7, 9: 0.8}

    def run_to_the_end(output: Path, interrupt_at: set[int]) -> tuple[ScriptedAccuracy, int]:
        """Trains, sending SIGTERM to this process during the evaluations at the global
        steps `interrupt_at`, and resuming after each stop; returns the script and the stops."""
        script = ScriptedAccuracy(values)
        script.install(monkeypatch)
        scripted = run_module.evaluate_data

        def evaluate_data(setup, data, console, title="eval"):
            result = scripted(setup, data, console, title)
            if script.steps[-1] in interrupt_at:
                interrupt_at.discard(script.steps[-1])
                os.kill(os.getpid(), signal.SIGTERM)
            return result

        monkeypatch.setattr(run_module, "evaluate_data", evaluate_data)
        config = _config(
            one_layer_hf_dir, data, output, epochs=3, eval_every_steps=3, early_stopping_patience=2
        )
        stops = 0
        while True:
            try:
                train(config, quiet=True)
                return script, stops
            except TrainingInterrupted:
                stops += 1

    plain, _ = run_to_the_end(tmp_path / "plain", set())
    # stopped inside epoch 1 (step evaluation at 3), at epoch 2's end (8, when the count is 1)
    # and inside epoch 3, at the evaluation that stops the run early (9)
    resumed, stops = run_to_the_end(tmp_path / "resumed", {3, 8, 9})
    assert stops == 3
    assert resumed.steps == plain.steps == [3, 4, 6, 8, 9]  # none repeated, none skipped

    want, got = _metrics(tmp_path / "plain"), _metrics(tmp_path / "resumed")
    assert got["stopped_early"] == want["stopped_early"]
    assert [
        (e["global_step"], e["best"], e["metrics"]["accuracy"]) for e in got["evaluations"]
    ] == [(e["global_step"], e["best"], e["metrics"]["accuracy"]) for e in want["evaluations"]]
    assert [(r["epoch"], r.get("best"), r.get("stopped_after_steps")) for r in got["epochs"]] == [
        (r["epoch"], r.get("best"), r.get("stopped_after_steps")) for r in want["epochs"]
    ]
    assert _best_checkpoint_step(tmp_path / "resumed") == _best_checkpoint_step(tmp_path / "plain")


@pytest.mark.slow  # trains a tiny model (seconds)
def test_a_real_run_stops_early_and_its_best_checkpoint_serves(tmp_path, one_layer_hf_dir, data):
    # No scripting: a min_delta of 1.0 means no accuracy can count as an improvement after the
    # first evaluation, so patience 2 stops at the third evaluation (global step 6).
    run = tmp_path / "run"
    code = main(
        train_args(
            one_layer_hf_dir,
            data[0],
            run,
            eval=data[1],
            buckets="16",
            epochs=3,
            learning_rate="1e-3",
            jit_compile="false",
            eval_every_steps=3,
            early_stopping_patience=2,
            early_stopping_min_delta=1.0,
            json=True,
            no_report=None,
        )
    )
    assert code == 0
    metrics = _metrics(run)
    assert metrics["status"] == "finished"
    assert (metrics["stopped_early"]["global_step"], metrics["stopped_early"]["epoch"]) == (6, 2)
    assert [e["global_step"] for e in metrics["evaluations"]] == [3, 6]
    assert [r["epoch"] for r in metrics["epochs"]] == [1, 2]
    report = (run / "report.html").read_text()
    assert 'alt="evaluation metrics per evaluation"' in report
    assert "Stopped early at epoch 2, step 2 (global step 6)" in report
    assert main(["evaluate", "--run", str(run), "--data", data[1], "--json"]) == 0


@pytest.mark.slow  # a process trains a tiny model and is killed; two runs train in this one
def test_killed_as_an_evaluation_starts_it_resumes_to_the_same_stop_and_weights(
    tmp_path, one_layer_hf_dir, data, capsys
):
    # Real metrics. min_delta 1.0: after the first evaluation none counts as an improvement,
    # so patience 2 stops at the third: global step 6 (evaluations at 3, 4 = epoch 1's end, 6).
    args = train_args(
        one_layer_hf_dir,
        data[0],
        None,
        command=None,
        eval=data[1],
        buckets="16",
        epochs=3,
        learning_rate="1e-3",
        dropout="0.1",  # the resumed run must continue the dropout RNG too
        jit_compile="false",
        eval_every_steps=3,
        save_every_steps=3,
        early_stopping_patience=2,
        early_stopping_min_delta=1.0,
    )
    plain, killed = tmp_path / "plain", tmp_path / "killed"
    code, err = train_here([*args, "--output-dir", str(plain)], capsys)
    assert code == 0, err
    # Killed as the evaluation at step 6 starts: the last checkpoint is epoch 1's (step 4,
    # saved before its evaluation), so the resumed run evaluates step 4 again, then 6.
    run_killed([*args, "--output-dir", str(killed)], ("eval", 3))
    assert [e["global_step"] for e in _metrics(killed)["evaluations"]] == [3]
    code, err = train_here([*args, "--output-dir", str(killed)], capsys)
    assert code == 0 and "resuming the unfinished run" in err, err
    assert "stopped early at epoch 2, step 2 (global step 6)" in err

    want, got = _metrics(plain), _metrics(killed)
    assert got["stopped_early"] == want["stopped_early"]
    assert want["stopped_early"]["global_step"] == 6
    for key in ("evaluations", "epochs", "final"):  # the same records, to float round-off
        flat_got, flat_want = _untimed(got[key]), _untimed(want[key])
        assert flat_got.keys() == flat_want.keys(), key
        assert flat_got == pytest.approx(flat_want, abs=1e-6), key
    assert [e["global_step"] for e in got["evaluations"]] == [3, 6]
    assert _best_checkpoint_step(killed) == _best_checkpoint_step(plain)
    cluster.assert_same_weights(plain, killed, atol=1e-6)


def _untimed(value, prefix: str = "") -> dict:
    """`value` flattened to {path: leaf}, without what measures time (it differs per run)."""
    if isinstance(value, dict):
        items = [(k, v) for k, v in value.items() if "second" not in k]
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return {prefix: value}
    flat = {}
    for key, item in items:
        flat.update(_untimed(item, f"{prefix}/{key}"))
    return flat


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--early-stopping-patience", "2"], "given only with --eval FILE"),
        (["--eval-every-steps", "10"], "given only with --eval FILE"),
        (["--early-stopping-min-delta", "0.01"], "given only with --early-stopping-patience"),
    ],
)
def test_without_what_it_needs_it_is_refused_by_train_and_check(
    tmp_path, one_layer_hf_dir, data, capsys, flags, words
):
    for command in ("check", "train"):
        quiet = True if command == "train" else None  # check has no --quiet
        args = train_args(one_layer_hf_dir, data[0], tmp_path / "run", command=command, quiet=quiet)
        assert main([*args, *flags]) == 2
        err = capsys.readouterr().err
        assert f"bertfit {command}: error: train." in err and words in err, err
        assert flags[0] in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_metrics_json_has_evaluations_and_stopped_early_only_when_used_and_reads_back():
    from bertfit.runs.records import EarlyStop, EpochRecord, RunSummary, StepEvaluation
    from bertfit.training.checkpointing import TrainingState

    epoch = EpochRecord(1, 0.5, 32, 10.0, 3.2, eval={"accuracy": 0.5, "num_examples": 16})
    plain = RunSummary("finished", "single-label", ["neg", "pos"], {}, {}, {}, epochs=[epoch])
    assert set(plain.to_dict()) == {
        "status",
        "task",
        "labels",
        "model",
        "data",
        "strategy",
        "epochs",
    }
    assert set(plain.to_dict()["epochs"][0]) == {
        "epoch",
        "train_loss",
        "train_examples",
        "train_examples_per_second",
        "train_seconds",
        "eval",
    }
    step = StepEvaluation(1, 3, 3, {"accuracy": 0.75, "num_examples": 16}, best=True)
    stop = EarlyStop(2, 1, 5, "accuracy", 0.75, 2, 0.0)
    used = RunSummary(**{**vars(plain), "evaluations": [step], "stopped_early": stop})
    values = used.to_dict()
    assert values["evaluations"] == [
        {"epoch": 1, "step": 3, "global_step": 3, "metrics": step.metrics, "best": True}
    ]
    assert values["stopped_early"]["global_step"] == 5
    assert RunSummary.from_dict(json.loads(json.dumps(values))) == used
    state = TrainingState(
        global_step=5, evaluations=[step], evaluations_without_improvement=2, stopped_early=stop
    )
    assert TrainingState.from_json(state.to_json()) == state
    # a checkpoint written before these fields existed still reads
    old = json.loads(TrainingState(global_step=4).to_json())
    for key in ("evaluations", "evaluations_without_improvement", "stopped_early"):
        del old[key]
    assert TrainingState.from_json(json.dumps(old)) == TrainingState(global_step=4)


def test_check_and_train_take_the_flags_into_the_run_config(tmp_path, data):
    from bertfit.cli import build_parser
    from bertfit.run_flags import run_config_from_args

    flags = ["--early-stopping-patience", "3", "--early-stopping-min-delta", "0.005"]
    flags += ["--eval-every-steps", "50"]
    for command in ("check", "train"):
        args = build_parser().parse_args([command, "--train", data[0], "--eval", data[1], *flags])
        t = run_config_from_args(args).train
        assert (t.early_stopping_patience, t.early_stopping_min_delta) == (3, 0.005)
        assert t.eval_every_steps == 50


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"early_stopping_patience": 0}, "at least 1"),
        ({"early_stopping_patience": 2, "early_stopping_min_delta": -0.1}, "zero or positive"),
        ({"eval_every_steps": 0}, "at least 1"),
    ],
)
def test_out_of_range_values_are_refused(settings, words):
    config = RunConfig(data=DataConfig(train="t.csv", eval="d.csv"), train=TrainConfig(**settings))
    with pytest.raises(ConfigError, match=words):
        config.validate()
