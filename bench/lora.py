"""Issue 48 benchmark: LoRA vs full fine-tuning of MiniLM-L6 on Rotten Tomatoes, several seeds
each, every run a `bertfit train` process of its own, one after the other.

    python -m bench.lora                                  # 2,500 rows, 2 epochs, 3 seeds
    python -m bench.lora --max-train-examples 8530 --epochs 3   # the whole train split
    python -m bench.lora --sides lora-bf16 --seeds 42 43   # LoRA on a bf16 frozen base

Both sides: max_seq_length 64, global batch 32, linear schedule with 10% warmup, weight decay
0.01, clipping 1.0, the [CLS] pooler head, accuracy on the 1,066 test rows after the last epoch.
Full fine-tuning at learning rate 5e-5 (bench/settings.py); LoRA (rank 8, alpha 16, query and
value, the head trained) at 1e-3, PEFT's usual rate for adapters; lora-bf16 the same on a
frozen base stored and computed in bfloat16 (`--base-precision bf16`); lora-int8 on a base whose
layers' kernels are stored in int8 (`--base-precision int8`); lora-all adapts every
Dense layer of the encoder's layers (`--lora-targets all`). Reported per side: each
seed's accuracy, their mean and spread (max - min), trainable parameters, and the run's saved
sizes (the whole run directory; `checkpoints/best`; a LoRA run's `checkpoints/adapter`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench.common import write_result
from bench.finetune import BERTFIT, _du_mib, run_measured
from bench.settings import BATCH, DECAY, SEQ, WARMUP
from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

FULL_LR, LORA_LR = 5e-5, 1e-3
LORA = ["--lora-rank", "8", "--lora-alpha", "16"]
SIDES = {
    "full": [],
    "lora": LORA,
    "lora-bf16": [*LORA, "--base-precision", "bf16"],
    "lora-int8": [*LORA, "--base-precision", "int8"],  # int8 kernels, dequantized (model/int8)
    "lora-all": [*LORA, "--lora-targets", "all"],  # QLoRA's advice: every linear layer
}


def train_once(args, work: Path, seed: int, side: str) -> dict:
    """One `bertfit train` run to its end, evaluated on the test split every epoch."""
    data = rotten_tomatoes_dir()
    lora = side != "full"
    run = work / f"{side}-{seed}"
    command = [*BERTFIT, "train", "--train", str(data / "train.csv")]
    command += ["--eval", str(data / "test.csv"), "--output-dir", str(run)]
    command += ["--max-seq-length", str(SEQ), "--batch-size", str(BATCH)]
    command += ["--epochs", str(args.epochs), "--warmup-ratio", str(WARMUP)]
    command += ["--weight-decay", str(DECAY), "--seed", str(seed), "--quiet"]
    command += ["--max-train-examples", str(args.max_train_examples)]
    command += ["--learning-rate", str(LORA_LR if lora else FULL_LR), *SIDES[side]]
    process = run_measured(command)
    metrics = json.loads((run / "metrics.json").read_text())
    result = {
        "seed": seed,
        "test_accuracy": metrics["epochs"][-1]["eval"]["accuracy"],
        "test_examples": metrics["epochs"][-1]["eval"]["num_examples"],
        "train_examples": metrics["train_num_examples"],
        "parameters": metrics["model"]["parameters"],
        "trainable_parameters": metrics["model"]["trainable_parameters"],
        "train_seconds": sum(e["train_seconds"] for e in metrics["epochs"]),
        "train_peak_rss_mib": process["peak_rss_mib"],
        "saved_mib": {
            "run": _du_mib(run),
            "checkpoints/best": _du_mib(run / "checkpoints" / "best"),
            "checkpoints/latest": _du_mib(run / "checkpoints" / "latest"),
        },
    }
    if lora:
        result["saved_mib"]["checkpoints/adapter"] = _du_mib(run / "checkpoints" / "adapter")
    print(json.dumps(result), flush=True)
    return result


def summarise(runs: list[dict]) -> dict:
    accuracies = [r["test_accuracy"] for r in runs]
    return {
        "accuracy_mean": statistics.mean(accuracies),
        "accuracy_spread": max(accuracies) - min(accuracies),
        "accuracies": accuracies,
        "trainable_parameters": runs[0]["trainable_parameters"],
        "parameters": runs[0]["parameters"],
        "saved_mib": runs[0]["saved_mib"],
        "train_seconds_mean": statistics.mean(r["train_seconds"] for r in runs),
        "runs": runs,
    }


def table_rows(result: dict) -> list[str]:
    """BENCHMARKS.md's rows (bench/run.py): each LoRA side against full fine-tuning."""
    s = result["settings"]
    what = f"MiniLM-L6, {s['train_rows']} RT rows, {s['epochs']} epochs, seq {s['max_seq_length']}"
    full = result.get("full")
    rows = []
    for side in [name for name in SIDES if name in result and name != "full"]:
        r = result[side]
        accuracies = f"{min(r['accuracies']):.3f}-{max(r['accuracies']):.3f}"
        ours = (
            f"{r['accuracy_mean']:.3f} ({accuracies}, {len(r['accuracies'])} seeds), "
            f"{r['trainable_parameters']:,} trained, adapter "
            f"{r['saved_mib']['checkpoints/adapter']:.2f} MiB"
        )
        if full is None:
            theirs, gap = "full fine-tuning in lora.json", "-"
        else:
            span = f"{min(full['accuracies']):.3f}-{max(full['accuracies']):.3f}"
            theirs = (
                f"full {full['accuracy_mean']:.3f} ({span}, {len(full['accuracies'])} seeds), "
                f"{full['trainable_parameters']:,} trained, best "
                f"{full['saved_mib']['checkpoints/best']:.0f} MiB"
            )
            gap = f"{100 * (r['accuracy_mean'] - full['accuracy_mean']):+.1f} points"
        rows.append(
            f"| {side} rank 8 vs full fine-tuning, {what}: test accuracy | {ours} | "
            f"{theirs} | {gap} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-train-examples", type=int, default=2500)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--sides", nargs="+", choices=list(SIDES), default=["full", "lora"])
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {side: [] for side in args.sides}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:  # interleaved: a slower machine later slows every side
            for side in args.sides:
                runs[side].append(train_once(args, Path(tmp), seed, side))
    sides = {side: summarise(side_runs) for side, side_runs in runs.items()}
    result = {
        "settings": {
            "max_seq_length": SEQ,
            "batch_size": BATCH,
            "epochs": args.epochs,
            "train_rows": args.max_train_examples,
            "full_learning_rate": FULL_LR,
            "lora": {"rank": 8, "alpha": 16, "targets": "query,value", "learning_rate": LORA_LR},
        },
        **sides,
    }
    if "full" in sides:
        for side in set(sides) - {"full"}:
            gap = sides["full"]["accuracy_mean"] - sides[side]["accuracy_mean"]
            result[f"{side}_accuracy_gap_points"] = 100 * gap
            trainable = sides[side]["trainable_parameters"] / sides["full"]["trainable_parameters"]
            result[f"{side}_trainable_ratio"] = trainable
    result["table_rows"] = table_rows(result)
    # bench/results/lora.json with full fine-tuning; lora_bf16.json for --sides lora-bf16 ...
    name = "_".join(side.replace("lora-", "") for side in args.sides if side != "full")
    write_result("lora" if "full" in sides else f"lora_{name}", result)


if __name__ == "__main__":
    main()
