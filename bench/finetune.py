"""Issue 11 benchmark: `bertfit train` / `evaluate` / `predict` with the CLI's default flags vs
transformers' Trainer and the equivalent transformers prediction script, MiniLM-L6 on Rotten
Tomatoes, each side in processes of its own, one after the other, on the same machine.

    python -m bench.finetune                       # 1 epoch (about 10 minutes on 2 cores)
    python -m bench.finetune --epochs 3            # the full setting
    python -m bench.finetune --max-train-examples 2000   # a quick look

Same settings for both (bench/settings.py): the train split, max_seq_length 64, global batch 32,
learning rate 5e-5, linear schedule with 10% warmup, weight decay 0.01, clipping 1.0, seed 42, the
[CLS] pooler head. The Trainer uses dynamic padding and `group_by_length`; bertfit its own
defaults (length buckets chosen from the data, XLA only with an accelerator, ...). Measured per
process: wall time, peak RSS (`os.wait4`), the time from launch to the end of the first optimizer
step (imports, loading, tokenizing, tracing: steps.jsonl's `wall_time` / a Trainer callback); the
training loop's seconds; test accuracy; evaluation and prediction throughput from raw text to
probabilities, in-process and as whole processes (median of 3); both sides predict in batches of
similar length.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import fraction_of_peak, matmul_gflops, write_result
from bench.settings import BATCH, DECAY, LR, SEED, SEQ, WARMUP
from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

ROOT = Path(__file__).resolve().parent.parent
BERTFIT = [sys.executable, "-m", "bertfit.cli"]
PEER = [sys.executable, "-m"]
REPEATS = 3


def run_measured(command: list[str]) -> dict:
    """Runs `command` to the end; its wall seconds, peak RSS in MiB, launch time and stdout."""
    launched = time.time()
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code:
            raise RuntimeError(f"{' '.join(command)} failed ({code}):\n{process.stderr.read()}")
        out.seek(0)
        return {
            "seconds": seconds,
            "peak_rss_mib": usage.ru_maxrss / 1024,
            "launched": launched,
            "stdout": out.read(),
        }


def _median_process(runs: list[dict]) -> dict:
    """The median wall time and the highest peak RSS of repeated runs of one command."""
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
    }


def _du_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def bertfit_side(args, work: Path, train_csv: Path, test_csv: Path) -> dict:
    run = work / "bertfit_run"
    command = [*BERTFIT, "train", "--train", str(train_csv), "--output-dir", str(run)]
    command += ["--max-seq-length", str(SEQ), "--batch-size", str(BATCH), "--epochs"]
    command += [str(args.epochs), "--learning-rate", str(LR), "--warmup-ratio", str(WARMUP)]
    command += ["--weight-decay", str(DECAY), "--seed", str(SEED), "--quiet"]
    if args.max_train_examples:
        command += ["--max-train-examples", str(args.max_train_examples)]
    process = run_measured(command)
    metrics = json.loads((run / "metrics.json").read_text())
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    config = (run / "config.yaml").read_text()
    evaluated = run_measured(
        [*BERTFIT, "evaluate", "--run", str(run), "--data", str(test_csv), "--json", "--quiet"]
    )
    evaluation = json.loads(evaluated["stdout"])
    predict = [*BERTFIT, "predict", "--run", str(run), "--data", str(test_csv), "--quiet"]
    predict += ["--output", str(work / "bertfit_predictions.csv")]
    predicted = _median_process([run_measured(predict) for _ in range(REPEATS)])
    return {
        "train_process_seconds": process["seconds"],
        "train_peak_rss_mib": process["peak_rss_mib"],
        "first_step_seconds": steps[0]["wall_time"] - process["launched"],
        "train_seconds": sum(e["train_seconds"] for e in metrics["epochs"]),
        "time_split": metrics["time"],
        "trace_counts": metrics["trace_counts"],
        "config": config,
        "checkpoint_mib": {
            "best (weights)": _du_mib(run / "checkpoints" / "best"),
            "latest (weights, optimizer, state)": _du_mib(run / "checkpoints" / "latest"),
        },
        "test_accuracy": evaluation["accuracy"],
        "test_examples": evaluation["num_examples"],
        "train_examples": metrics["train_num_examples"],
        "evaluate_examples_per_second": evaluation["examples_per_second"],
        "evaluate_process_seconds": evaluated["seconds"],
        "predict_process_seconds": predicted["seconds"],
        "predict_peak_rss_mib": predicted["peak_rss_mib"],
    }


def peer_side(args, work: Path, test_csv: Path) -> dict:
    out = work / "peer.json"
    command = [*PEER, "bench.peer_trainer", "--epochs", str(args.epochs), "--out", str(out)]
    command += ["--workdir", str(work / "peer_run")]
    if args.max_train_examples:
        command += ["--max-train-examples", str(args.max_train_examples)]
    process = run_measured(command)
    trained = json.loads(out.read_text())
    predict = [*PEER, "bench.peer_predict", "--data", str(test_csv), "--out", str(out)]
    predict += ["--output", str(work / "peer_predictions.csv")]
    runs, in_process = [], []  # each run gives its whole-process and in-process figures
    for _ in range(REPEATS):
        runs.append(run_measured(predict))
        in_process.append(json.loads(out.read_text()))
    predicted = _median_process(runs)
    seconds = statistics.median(r["seconds"] for r in in_process)
    gflop = in_process[0]["forward_gflop"]
    return {
        "train_process_seconds": process["seconds"],
        "train_peak_rss_mib": process["peak_rss_mib"],
        "first_step_seconds": trained["first_step_ended"] - process["launched"],
        "train_seconds": trained["train_seconds"],
        "test_accuracy": trained["test_accuracy"],
        "test_examples": trained["test_examples"],
        "train_examples": trained["train_examples"],
        "torch_threads": trained["torch_threads"],
        "predict_examples_per_second": in_process[0]["examples"] / seconds,
        "predict_gflop_per_second": gflop / seconds,
        "predict_fraction_of_matmul_peak": fraction_of_peak(gflop, seconds, matmul_gflops()),
        "predict_token_slots_per_example": in_process[0]["token_slots_per_example"],
        "predict_process_seconds": predicted["seconds"],
        "predict_peak_rss_mib": predicted["peak_rss_mib"],
    }


def _check_peer(theirs: dict) -> None:
    """Says so when the peer's prediction ran far below this machine's matmul speed: the
    harness, not transformers, would then be what the ratios measure."""
    fraction = theirs["predict_fraction_of_matmul_peak"]
    if fraction < 0.5:
        print(
            f"warning: the peer's prediction used {fraction:.0%} of this machine's matmul speed;"
            " check its threads and that nothing else ran",
            file=sys.stderr,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-train-examples", type=int, default=None)
    args = parser.parse_args()
    data = rotten_tomatoes_dir()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        theirs = peer_side(args, work, data / "test.csv")
        ours = bertfit_side(args, work, data / "train.csv", data / "test.csv")
    _check_peer(theirs)
    ratios = {
        "train_loop": ours["train_seconds"] / theirs["train_seconds"],
        "train_process": ours["train_process_seconds"] / theirs["train_process_seconds"],
        "first_step": ours["first_step_seconds"] / theirs["first_step_seconds"],
        "train_peak_rss": ours["train_peak_rss_mib"] / theirs["train_peak_rss_mib"],
        "evaluate_throughput": ours["evaluate_examples_per_second"]
        / theirs["predict_examples_per_second"],
        "predict_process_speed": theirs["predict_process_seconds"]
        / ours["predict_process_seconds"],
    }
    if args.max_train_examples:
        name = "finetune_quick"
    else:
        name = "finetune" if args.epochs == 1 else "finetune_long"
    write_result(
        name,
        {
            "settings": {
                "max_seq_length": SEQ,
                "batch": BATCH,
                "learning_rate": LR,
                "epochs": args.epochs,
                "warmup_ratio": WARMUP,
                "seed": SEED,
                "max_train_examples": args.max_train_examples,
            },
            "bertfit": ours,
            "transformers": theirs,
            "bertfit_over_peer": ratios,
            "accuracy_difference_bertfit_minus_trainer": ours["test_accuracy"]
            - theirs["test_accuracy"],
        },
    )


if __name__ == "__main__":
    main()
