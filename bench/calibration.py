"""Issue 49 calibration benchmark: does temperature scaling (fitted on dev at the end of `train`)
ever hurt held-out test NLL or accuracy, and do per-label multi-label thresholds rescue a rare
label that one micro-F1-tuned threshold silences?

    python -m bench.calibration                    # every trial not yet in the results file
    python -m bench.calibration --seeds 1,2,3 --only rt
    python -m bench.calibration --markdown         # the tables of docs/calibration.md

Trials (MiniLM-L6, seq 64, batch 32, lr 5e-5, the defaults otherwise; `--calibrate auto`):

- `rt`: Rotten Tomatoes single-label, the first `RT_ROWS` training rows, 1 epoch, dev = RT dev
  (1,264 rows, the calibration set), test = RT test (1,283 rows).
- `rare`: bench.rare_labels' two rare keyword tags (`acting` 7.6%, `script` 4.8% of test),
  1,423 training rows, 3 epochs, dev 638 rows, test 1,283.

Per trial the run's test probabilities are read through `load_classifier` (what predict,
evaluate and every export give: "auto", the temperatures `--calibrate auto` kept), the
uncalibrated ones ("before") recovered exactly from them and the kept temperatures
(softmax(log p * T); sigmoid(logit(p) * T_j)), and "always" = the temperatures fitted on all of
dev, applied whether or not they helped held-out dev rows. For `rare`, "old_threshold" is the
single global threshold with the best dev micro-F1 (bertfit before issue 49) on the uncalibrated
probabilities; "auto" uses the run's per-label thresholds on its own probabilities.

The results file (bench/results/calibration.json) is rewritten after every trial.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bench.common import RESULTS, machine
from bench.rare_labels import write
from bench.settings import BATCH, LR, SEQ
from bertfit.runs.metrics import best_threshold

OUT = RESULTS / "calibration.json"
SEEDS = (1, 2, 3)
RT_ROWS = 2500
EPOCHS = {"rt": 1, "rare": 3}
TASKS = {"rt": "single-label", "rare": "multi-label"}


def _probabilities(run: Path, data: Path):
    """(targets, calibrated probabilities, task) of the run on `data`."""
    from bertfit.data.sources import read_examples
    from bertfit.inference.predictor import load_classifier
    from bertfit.inference.run import classifier_source_spec

    classifier = load_classifier(run)
    examples = read_examples(str(data), classifier_source_spec(classifier))
    targets = classifier.task.targets(examples, str(data))
    outputs = classifier.outputs([e.text for e in examples])
    return targets, np.asarray(outputs["probabilities"], np.float64), classifier.task


def _uncalibrated(kind: str, probabilities: np.ndarray, temperatures) -> np.ndarray:
    from bertfit.runs.calibration import logits_of, scaled

    if not temperatures:
        return probabilities
    return scaled(kind, logits_of(kind, probabilities) * np.asarray(temperatures), 1.0)


def _scores(task, targets, probabilities) -> dict:
    """NLL, ECE, Brier and the task's headline metrics of `probabilities`."""
    from bertfit.runs.calibration import (
        brier_score,
        expected_calibration_error,
        negative_log_likelihood,
    )
    from bertfit.runs.metrics import task_metrics

    scores = {
        "nll": negative_log_likelihood(task.kind, targets, probabilities),
        "ece": expected_calibration_error(task.kind, targets, probabilities),
        "brier": brier_score(task.kind, targets, probabilities),
    }
    metrics = task_metrics(task, targets, probabilities)
    for key in ("accuracy", "micro_f1", "macro_f1", "per_label_f1"):
        if key in metrics:
            scores[key] = metrics[key]
    return scores


def trial(name: str, seed: int, data: Path, work: Path) -> dict:
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from bertfit.training.run import train

    config = RunConfig(
        output_dir=str(work / "run"),
        model=ModelConfig(name="minilm-l6", max_seq_length=SEQ, pooling="mean", task=TASKS[name]),
        data=DataConfig(
            train=str(data / "train.csv"),
            eval=str(data / "dev.csv"),
            max_train_examples=RT_ROWS if name == "rt" else None,
        ),
        train=TrainConfig(batch_size=BATCH, epochs=EPOCHS[name], learning_rate=LR, seed=seed),
    ).validate()
    train(config, quiet=True)
    return score(Path(config.output_dir), data)


def score(run: Path, data: Path) -> dict:
    """A trained run's test scores: uncalibrated, the dev fit always applied, and what the
    shipped `--calibrate auto` rule keeps (recomputed here from the run's dev outputs with
    `bertfit.runs.calibration.fit_calibration`, so a run trained by an older rule is scored
    by the current one)."""
    from bertfit.runs.calibration import fit_calibration

    targets, given, task = _probabilities(run, data / "test.csv")
    plain = _uncalibrated(task.kind, given, task.temperatures)
    dev = np.load(run / "best_eval_outputs.npz")
    bare = type(task)(task.kind, task.labels)
    calibration = fit_calibration(bare, dev["targets"], dev["outputs"])
    fitted, kept = calibration.fitted_temperatures, calibration.temperatures
    always = _uncalibrated(task.kind, plain, [1 / t for t in fitted])  # divide by the fit
    auto = _uncalibrated(task.kind, plain, [1 / t for t in kept])
    auto_task = calibration.calibrated_task(bare)
    result = {
        "fitted_temperatures": list(fitted),
        "held_out_gains": calibration.held_out_gains,
        "held_out_errors": calibration.held_out_errors,
        "kept_temperatures": list(kept),
        "dev": {"before": calibration.before, "after": calibration.after},
        "test": {
            "before": _scores(bare, targets, plain),
            "always": _scores(bare, targets, always),
            "auto": _scores(auto_task, targets, auto),
        },
    }
    if task.kind == "multi-label":
        old = best_threshold(dev["targets"], dev["outputs"])
        old_task = type(task)(task.kind, task.labels, threshold=old)
        result["thresholds"] = {"old_global": old, "new_per_label": list(auto_task.thresholds)}
        result["test"]["old_threshold"] = _scores(old_task, targets, plain)
    return result


def spread(trials: dict, side: str, metric: str) -> dict | None:
    values = [t["test"][side][metric] for t in trials.values() if metric in t["test"][side]]
    if not values:
        return None
    return {
        "mean": statistics.mean(values),
        "min": min(values),
        "max": max(values),
        "seeds": len(values),
    }


def summarise(results: dict) -> dict:
    """Per set: each metric's spread per variant, and the seeds where a calibration variant
    had a higher test NLL or a lower test accuracy / macro-F1 than the uncalibrated model."""
    summary = {}
    for name, trials in results["trials"].items():
        sides = ["before", "always", "auto"] + (["old_threshold"] if name == "rare" else [])
        metrics = ("nll", "ece", "brier", "accuracy", "micro_f1", "macro_f1")
        summary[name] = {
            side: {m: spread(trials, side, m) for m in metrics if spread(trials, side, m)}
            for side in sides
        }
        for side in ("always", "auto"):
            summary[name][f"seeds_where_{side}_hurt_test_nll"] = [
                seed
                for seed, t in trials.items()
                if t["test"][side]["nll"] > t["test"]["before"]["nll"] + 1e-9
            ]
    return summary


def _cell(value: dict | None, digits: int = 3) -> str:
    if not value:
        return "-"
    return f"{value['mean']:.{digits}f} [{value['min']:.{digits}f}-{value['max']:.{digits}f}]"


def markdown(results: dict) -> str:
    """The tables of docs/calibration.md: test scores as mean [min-max] over seeds."""
    lines = []
    names = {"before": "uncalibrated", "always": "T fitted on dev, always", "auto": "auto"}
    names["old_threshold"] = "one micro-F1 threshold (old)"
    for name, summary in results.get("summary", {}).items():
        metrics = ["nll", "ece", "brier"] + (
            ["accuracy"] if name == "rt" else ["micro_f1", "macro_f1"]
        )
        lines.append(f"\n**{name}** (test; seeds {', '.join(results['trials'][name])})\n")
        lines.append("| variant | " + " | ".join(metrics) + " |")
        lines.append("|---" * (len(metrics) + 1) + "|")
        for side, label in names.items():
            if side in summary:
                cells = [_cell(summary[side].get(m)) for m in metrics]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _save(results: dict, out: Path) -> None:
    results["summary"] = summarise(results)
    out.write_text(json.dumps(results, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--only", default="rt,rare")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--markdown", action="store_true", help="print the tables and stop")
    parser.add_argument("--score", action="append", help="NAME:SEED:RUN_DIR, trained already")
    args = parser.parse_args()
    out = args.out
    results = json.loads(out.read_text()) if out.exists() else {"trials": {}}
    if args.markdown:
        print(markdown(results))
        return
    if args.score:  # runs trained already: NAME:SEED:RUN_DIR
        with tempfile.TemporaryDirectory() as folder:
            write(Path(folder))
            for item in args.score:
                name, seed, run = item.split(":", 2)
                done = results["trials"].setdefault(name, {})
                done[seed] = score(Path(run), Path(folder) / name)
                _save(results, out)
        return
    results["machine"] = machine()
    with tempfile.TemporaryDirectory() as folder:
        sets = Path(folder) / "sets"
        write(sets)
        for seed in (int(s) for s in args.seeds.split(",")):
            for name in args.only.split(","):
                done = results["trials"].setdefault(name, {})
                if str(seed) in done:
                    continue
                work = Path(folder) / f"{name}-{seed}"
                done[str(seed)] = trial(name, seed, sets / name, work)
                _save(results, out)
                print(name, seed, json.dumps(done[str(seed)]["test"]), flush=True)


if __name__ == "__main__":
    main()
