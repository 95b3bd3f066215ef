"""Issue 46: fine-tuning MiniLM-L6 on Keras' JAX backend vs its TensorFlow backend vs the
transformers Trainer, in one run, one process each, one after the other.

    python -m bench.backends                          # 2,000 Rotten Tomatoes rows, 1 epoch
    python -m bench.backends --max-train-examples 8530  # the whole train split

The same settings on every side (bench/settings.py: seq 64, batch 32, lr 5e-5, 10% warmup,
weight decay 0.01, seed 42; CLI defaults otherwise): `bertfit train --backend tensorflow`,
`bertfit train --backend jax`, and bench/peer_trainer.py (the Trainer, dynamic padding, 2 torch
threads). bertfit's two runs are evaluated on the 1,283 test rows by `bertfit evaluate` (in
TensorFlow, as every run is). Reported per side: the training loop's seconds (first step
included, as for the Trainer), the whole process, launch to the end of the first step, peak
RSS, test accuracy; for bertfit, the steps' time without the calls that compiled (metrics.json's
time split) and the train step's compilations (JAX: one per bucket shape, none after warm-up),
the buckets and the token slots per example they pad to.

The JAX run is made twice, the second time on the first's compiled steps (JAX's persistent
compilation cache, in a directory of this benchmark's own that starts empty): what a rerun, a
sweep's next trial or a fold costs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from bench.common import write_result
from bench.finetune import BERTFIT, peer_side, run_measured
from bench.settings import BATCH, DECAY, LR, SEED, SEQ, WARMUP
from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

BACKENDS = ("tensorflow", "jax")
# the JAX run again, its steps loaded from the first run's compilations
JAX_CACHED = "jax_cached"


def bertfit_side(args, work: Path, backend: str, name: str | None = None) -> dict:
    data = rotten_tomatoes_dir()
    run = work / f"bertfit-{name or backend}"
    command = [*BERTFIT, "train", "--train", str(data / "train.csv"), "--output-dir", str(run)]
    command += ["--backend", backend, "--max-seq-length", str(SEQ), "--batch-size", str(BATCH)]
    command += ["--epochs", str(args.epochs), "--learning-rate", str(LR)]
    command += ["--warmup-ratio", str(WARMUP), "--weight-decay", str(DECAY)]
    command += ["--seed", str(SEED), "--quiet", "--max-train-examples"]
    command += [str(args.max_train_examples)]
    process = run_measured(command)
    metrics = json.loads((run / "metrics.json").read_text())
    lengths = metrics["data"]["token_lengths"]
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    evaluate = [*BERTFIT, "evaluate", "--run", str(run), "--data", str(data / "test.csv")]
    evaluation = json.loads(run_measured([*evaluate, "--json", "--quiet"])["stdout"])
    return {
        "train_seconds": sum(e["train_seconds"] for e in metrics["epochs"]),
        "train_process_seconds": process["seconds"],
        "first_step_seconds": steps[0]["wall_time"] - process["launched"],
        "train_peak_rss_mib": process["peak_rss_mib"],
        "time_split": metrics["time"],
        "trace_counts": metrics["trace_counts"],
        "buckets": lengths["buckets"],
        # at the bucket lengths (TensorFlow without XLA pads each batch to its longest row)
        "token_slots_per_example": sum(lengths["slots"]) / sum(lengths["examples"]),
        "test_accuracy": evaluation["accuracy"],
        "train_examples": metrics["train_num_examples"],
        "final_loss": steps[-1].get("loss"),
    }


def table(result: dict) -> list[str]:
    """BENCHMARKS.md's section table: every side, its loop against the Trainer's."""
    sides = {f"bertfit --backend {b}": result["bertfit"][b] for b in BACKENDS}
    sides["bertfit --backend jax, compilations cached"] = result["bertfit"][JAX_CACHED]
    sides["transformers Trainer"] = result["transformers"]
    trainer = result["transformers"]["train_seconds"]
    rows = [
        "| side | training loop | vs Trainer | steps after compiling | whole process | "
        "first step | peak RSS | test accuracy | train-step compilations |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, side in sides.items():
        traces = side.get("trace_counts", {}).get("train_step", "-")
        steps = side.get("time_split", {}).get("train")
        steps = f"{steps:.0f} s" if steps is not None else "-"
        rows.append(
            f"| {name} | {side['train_seconds']:.0f} s | {side['train_seconds'] / trainer:.2f}x | "
            f"{steps} | "
            f"{side['train_process_seconds']:.0f} s | {side['first_step_seconds']:.1f} s | "
            f"{side['train_peak_rss_mib']:.0f} MiB | {side['test_accuracy']:.4f} | {traces} |"
        )
    return rows


def table_rows(result: dict) -> list[str]:
    """BENCHMARKS.md's results-table rows (bench/run.py): each backend's training loop against
    the Trainer's, and JAX's against TensorFlow's."""
    s, ours, theirs = result["settings"], result["bertfit"], result["transformers"]
    what = f"MiniLM-L6, {s['max_train_examples']} RT rows, {s['epochs']} epoch(s)"
    rows = [
        f"| fine-tune {what}: training loop, `--backend {backend}` | "
        f"{ours[backend]['train_seconds']:.0f} s | {theirs['train_seconds']:.0f} s (Trainer) | "
        f"{ours[backend]['train_seconds'] / theirs['train_seconds']:.2f}x the time |"
        for backend in BACKENDS
    ]
    jax, tensorflow = ours["jax"]["train_seconds"], ours["tensorflow"]["train_seconds"]
    rows.append(
        f"| fine-tune {what}: training loop, JAX vs TensorFlow | {jax:.0f} s (JAX) | "
        f"{tensorflow:.0f} s (TensorFlow) | {jax / tensorflow:.2f}x the time |"
    )
    cached = ours[JAX_CACHED]["train_seconds"]
    rows.append(
        f"| fine-tune {what}: training loop, JAX (compilations cached) vs TensorFlow | "
        f"{cached:.0f} s (JAX) | {tensorflow:.0f} s (TensorFlow) | "
        f"{cached / tensorflow:.2f}x the time |"
    )
    jax, tensorflow = (ours[b]["time_split"]["train"] for b in ("jax", "tensorflow"))
    rows.append(
        f"| fine-tune {what}: steps after compiling, JAX vs TensorFlow | {jax:.0f} s (JAX) | "
        f"{tensorflow:.0f} s (TensorFlow) | {jax / tensorflow:.2f}x the time |"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-train-examples", type=int, default=2000)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        theirs = peer_side(args, work, rotten_tomatoes_dir() / "test.csv")
        # the JAX runs' compilations here, not in the user's cache: the first run compiles
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(work / "jax-compilations")
        ours = {backend: bertfit_side(args, work, backend) for backend in BACKENDS}
        ours[JAX_CACHED] = bertfit_side(args, work, "jax", JAX_CACHED)
    tensorflow, jax, cached = ours["tensorflow"], ours["jax"], ours[JAX_CACHED]
    result = {
        "settings": {
            "max_seq_length": SEQ,
            "batch": BATCH,
            "learning_rate": LR,
            "epochs": args.epochs,
            "max_train_examples": args.max_train_examples,
            "seed": SEED,
        },
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "bertfit": ours,
        "transformers": theirs,
        "ratios": {
            "jax_over_tensorflow_train_loop": jax["train_seconds"] / tensorflow["train_seconds"],
            "jax_over_tensorflow_steps_after_compiling": jax["time_split"]["train"]
            / tensorflow["time_split"]["train"],
            "jax_cached_over_tensorflow_train_loop": cached["train_seconds"]
            / tensorflow["train_seconds"],
            "jax_over_tensorflow_token_slots": jax["token_slots_per_example"]
            / tensorflow["token_slots_per_example"],
            "tensorflow_over_trainer_train_loop": tensorflow["train_seconds"]
            / theirs["train_seconds"],
            "jax_over_trainer_train_loop": jax["train_seconds"] / theirs["train_seconds"],
        },
    }
    result["table_rows"] = table_rows(result)
    print("\n".join(table(result)))
    write_result("backends", result)


if __name__ == "__main__":
    main()
