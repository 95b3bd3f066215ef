"""Issue 46: fine-tuning MiniLM-L6 on Keras' JAX backend vs its TensorFlow backend vs the
transformers Trainer, in one run, one process each, one after the other.

    python -m bench.backends                          # 2,000 Rotten Tomatoes rows, 1 epoch
    python -m bench.backends --max-train-examples 8530  # the whole train split
    python -m bench.backends --cli-defaults --sides tensorflow,jax  # train's defaults

`--cli-defaults` trains as `bertfit train` does when given only its data: every training row,
3 epochs, max_seq_length 128 (the other settings below are the CLI's defaults already);
`--sides` picks which of tensorflow, jax, jax_cached and transformers run, and adds
tensorflow_packing and jax_packing: the same runs with `--packing` (issue 55: rows of
max_seq_length holding several examples, one compiled shape).

    python -m bench.backends --sides tensorflow,jax,tensorflow_packing,jax_packing

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
TRAINER = "transformers"
SIDES = (*BACKENDS, JAX_CACHED, TRAINER)
# each backend's run with --packing (asked for by --sides)
PACKING = "_packing"
PACKED_SIDES = tuple(backend + PACKING for backend in BACKENDS)
CLI_EPOCHS, CLI_SEQ = 3, 128  # `bertfit train`'s defaults


def bertfit_side(args, work: Path, backend: str, name: str | None = None) -> dict:
    """One `bertfit train` run on `backend`, `--packing` when `name` ends in PACKING."""
    data = rotten_tomatoes_dir()
    run = work / f"bertfit-{name or backend}"
    command = [*BERTFIT, "train", "--train", str(data / "train.csv"), "--output-dir", str(run)]
    command += ["--backend", backend, "--max-seq-length", str(args.max_seq_length)]
    command += ["--batch-size", str(BATCH), "--epochs", str(args.epochs)]
    command += ["--learning-rate", str(LR), "--warmup-ratio", str(WARMUP)]
    command += ["--weight-decay", str(DECAY), "--seed", str(SEED), "--quiet"]
    if args.max_train_examples:
        command += ["--max-train-examples", str(args.max_train_examples)]
    if (name or "").endswith(PACKING):
        command += ["--packing"]
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
        "buckets": lengths["buckets"],  # with --packing, the rows' one length
        # at the bucket lengths (TensorFlow without XLA pads each batch to its longest row);
        # with --packing the packed rows' slots
        "token_slots_per_example": sum(lengths["slots"]) / sum(lengths["examples"]),
        "test_accuracy": evaluation["accuracy"],
        "train_examples": metrics["train_num_examples"],
        "final_loss": steps[-1].get("loss"),
    }


NAMES = {
    "tensorflow": "bertfit --backend tensorflow",
    "jax": "bertfit --backend jax",
    JAX_CACHED: "bertfit --backend jax, compilations cached",
    TRAINER: "transformers Trainer",
    **{backend + PACKING: f"bertfit --backend {backend} --packing" for backend in BACKENDS},
}


def sides_of(result: dict) -> dict[str, dict]:
    """The sides that ran, by their names in `SIDES`."""
    return {**result["bertfit"], **({TRAINER: result[TRAINER]} if TRAINER in result else {})}


def table(result: dict) -> list[str]:
    """BENCHMARKS.md's section table: every side that ran, its loop against TensorFlow's (the
    issue's comparison) and the Trainer's where it ran."""
    sides = sides_of(result)
    tensorflow = sides["tensorflow"]["train_seconds"]
    trainer = sides.get(TRAINER, {}).get("train_seconds")
    rows = [
        "| side | training loop | vs TensorFlow | vs Trainer | steps after compiling | "
        "whole process | first step | peak RSS | test accuracy | train-step compilations | "
        "buckets |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, side in sides.items():
        traces = side.get("trace_counts", {}).get("train_step", "-")
        steps = side.get("time_split", {}).get("train")
        steps = f"{steps:.0f} s" if steps is not None else "-"
        loop = side["train_seconds"]
        versus_trainer = f"{loop / trainer:.2f}x" if trainer else "-"
        buckets = ", ".join(map(str, side.get("buckets", []))) or "-"
        if key.endswith(PACKING):
            buckets = f"rows of {buckets}"
        rows.append(
            f"| {NAMES[key]} | {loop:.0f} s | {loop / tensorflow:.2f}x | {versus_trainer} | "
            f"{steps} | {side['train_process_seconds']:.0f} s | "
            f"{side['first_step_seconds']:.1f} s | {side['train_peak_rss_mib']:.0f} MiB | "
            f"{side['test_accuracy']:.4f} | {traces} | {buckets} |"
        )
    return rows


def ratios(result: dict) -> dict[str, float]:
    """JAX's loop, steps and token slots against TensorFlow's, and each side's loop against
    the Trainer's, for the sides that ran."""
    sides = sides_of(result)
    tensorflow, out = sides["tensorflow"], {}
    for key in ("jax", JAX_CACHED, *PACKED_SIDES):
        if key in sides:
            jax = sides[key]
            out[f"{key}_over_tensorflow_train_loop"] = (
                jax["train_seconds"] / tensorflow["train_seconds"]
            )
            out[f"{key}_over_tensorflow_steps_after_compiling"] = (
                jax["time_split"]["train"] / tensorflow["time_split"]["train"]
            )
            out[f"{key}_over_tensorflow_token_slots"] = (
                jax["token_slots_per_example"] / tensorflow["token_slots_per_example"]
            )
    if TRAINER in sides:
        for key in BACKENDS:
            if key in sides:
                out[f"{key}_over_trainer_train_loop"] = (
                    sides[key]["train_seconds"] / sides[TRAINER]["train_seconds"]
                )
    return out


def table_rows(result: dict) -> list[str]:
    """BENCHMARKS.md's results-table rows (bench/run.py): JAX's loop and steps against
    TensorFlow's, and each backend's loop against the Trainer's where it ran."""
    s, sides = result["settings"], sides_of(result)
    rows_used = s["max_train_examples"] or "all"
    what = f"MiniLM-L6, {rows_used} RT rows, {s['epochs']} epoch(s), seq {s['max_seq_length']}"
    rows = []
    if TRAINER in sides:
        theirs = sides[TRAINER]["train_seconds"]
        rows += [
            f"| fine-tune {what}: training loop, `--backend {key}` | "
            f"{sides[key]['train_seconds']:.0f} s | {theirs:.0f} s (Trainer) | "
            f"{sides[key]['train_seconds'] / theirs:.2f}x the time |"
            for key in BACKENDS
            if key in sides
        ]
    tensorflow = sides["tensorflow"]
    labels = (
        ("jax", "JAX"),
        (JAX_CACHED, "JAX (compilations cached)"),
        ("jax_packing", "JAX --packing"),
        ("tensorflow_packing", "TensorFlow --packing"),
    )
    for key, label in labels:
        if key in sides:
            jax = sides[key]["train_seconds"]
            rows.append(
                f"| fine-tune {what}: training loop, {label} vs TensorFlow | {jax:.0f} s (JAX) | "
                f"{tensorflow['train_seconds']:.0f} s (TensorFlow) | "
                f"{jax / tensorflow['train_seconds']:.2f}x the time |"
            )
    if "jax" in sides:
        jax, theirs = sides["jax"]["time_split"]["train"], tensorflow["time_split"]["train"]
        rows.append(
            f"| fine-tune {what}: steps after compiling, JAX vs TensorFlow | {jax:.0f} s (JAX) | "
            f"{theirs:.0f} s (TensorFlow) | {jax / theirs:.2f}x the time |"
        )
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-train-examples", type=int, default=2000, help="0: every row")
    parser.add_argument("--max-seq-length", type=int, default=SEQ)
    parser.add_argument(
        "--cli-defaults",
        action="store_true",
        help=f"every row, {CLI_EPOCHS} epochs, seq {CLI_SEQ}: `bertfit train`'s defaults",
    )
    parser.add_argument(
        "--sides", default=",".join(SIDES), help="of " + ", ".join((*SIDES, *PACKED_SIDES))
    )
    args = parser.parse_args(argv)
    if args.cli_defaults:
        args.epochs, args.max_train_examples, args.max_seq_length = CLI_EPOCHS, 0, CLI_SEQ
    args.sides = args.sides.split(",")
    known = (*SIDES, *PACKED_SIDES)
    if unknown := set(args.sides) - set(known):
        parser.error(f"--sides: unknown {', '.join(sorted(unknown))}; of {', '.join(known)}")
    if "tensorflow" not in args.sides:
        parser.error("--sides: tensorflow is every ratio's denominator; keep it")
    if TRAINER in args.sides and args.max_seq_length != SEQ:
        parser.error(f"--sides: the Trainer side truncates at {SEQ} tokens; leave it out")
    if JAX_CACHED in args.sides and "jax" not in args.sides:
        parser.error("--sides: jax_cached loads what the jax side compiled; add jax")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    load_before = os.getloadavg()
    peer = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if TRAINER in args.sides:
            peer[TRAINER] = peer_side(args, work, rotten_tomatoes_dir() / "test.csv")
        # the JAX runs' compilations here, not in the user's cache: the first run compiles
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(work / "jax-compilations")
        ours = {b: bertfit_side(args, work, b) for b in BACKENDS if b in args.sides}
        if JAX_CACHED in args.sides:
            ours[JAX_CACHED] = bertfit_side(args, work, "jax", JAX_CACHED)
        for backend in BACKENDS:  # each packed run compiles its own shape
            if backend + PACKING in args.sides:
                ours[backend + PACKING] = bertfit_side(args, work, backend, backend + PACKING)
    result = {
        "settings": {
            "max_seq_length": args.max_seq_length,
            "batch": BATCH,
            "learning_rate": LR,
            "epochs": args.epochs,
            "max_train_examples": args.max_train_examples,
            "seed": SEED,
            "sides": args.sides,
        },
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "bertfit": ours,
        **peer,
    }
    result["ratios"] = ratios(result)
    result["table_rows"] = table_rows(result)
    print("\n".join(table(result)))
    name = "backends" if not args.cli_defaults else "backends_cli_defaults"
    if set(PACKED_SIDES) & set(args.sides):
        name += "_packing"  # beside issue 46's results, not over them
    write_result(name, result)


if __name__ == "__main__":
    main()
