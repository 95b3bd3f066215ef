"""Issue 35 benchmark: `--long-documents truncate` vs `chunk` (each `--chunk-pooling`) on a real
long-document set, the 189 US convention speeches labelled by party (144 / 22 / 23 train / dev /
test; median ~550 words, longest ~3,900), MiniLM-L6, at max_seq_length 128 and 512.

    python -m bench.long_documents                          # every arm, seeds 1,2,3
    python -m bench.long_documents --seq-lengths 128 --seeds 1,2
    python -m bench.long_documents --stop-at 09:00          # launch nothing after 09:00 UTC
    python -m bench.long_documents --table                  # only print the summary table

Each run is a `bertfit train` process on train with `--eval dev` (the best dev checkpoint is
kept), then a `bertfit evaluate` process on test: test accuracy and macro-F1, the train
process's wall time and peak RSS (`os.wait4`), the training loop's seconds, and the windows the
run cut (metrics.json `data.windows`). Same settings on every arm (SETTINGS). Runs go in the
order a tight budget wants: 128 before 512, truncate before chunk, mean before max and
attention. Each finished run is written to bench/results/long_documents.json at once, so partial
results survive; a run already there with the same settings is not run again.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, write_result
from bench.finetune import BERTFIT, run_measured
from bertfit.data.convention_speeches import convention_speeches_dir

NAME = "long_documents"
# 144 speeches, 123/66 by party. Chosen for a 2-core CPU shared by several people, where one
# 128-token window step of 8 documents took 6-9 s and a chunk step of up to 8 windows each
# 60-90 s: batch 8 gives 18 optimizer steps an epoch, 3 epochs 54 steps, at lr 1e-4 (twice
# MiniLM-L6's usual 5e-5, for the few steps) with 10% warmup; balanced class weights, since at
# 5e-5 a 5-epoch run still predicted only the majority party on dev after 2 epochs. The best dev
# epoch by macro-F1 is kept. max_chunks 4 (the CLI's default is 8) keeps a chunk run at most 4x
# a truncate run's windows at 128: 4 windows of 128 hold 411 ids (3.3x truncate's 126), 4 of
# 512 hold 1,659 (most speeches whole). The stride is the CLI's default, a quarter window.
SETTINGS = {
    "model": "minilm-l6",
    "epochs": 3,
    "batch_size": 8,
    "learning_rate": 1e-4,
    "warmup_ratio": 0.1,
    "class_weights": "balanced",
    "max_chunks": 4,
    "best_metric": "macro_f1",
}
ARMS = ("truncate", "mean", "max", "attention")  # truncate, then chunk with each pooling


def arm_flags(arm: str) -> list[str]:
    """The flags that make `arm`: truncate, or chunk with the arm's pooling.

    >>> arm_flags("max")
    ['--long-documents', 'chunk', '--chunk-pooling', 'max', '--max-chunks', '4']
    """
    if arm == "truncate":
        return ["--long-documents", "truncate"]
    chunk = ["--long-documents", "chunk", "--chunk-pooling", arm]
    return [*chunk, "--max-chunks", str(SETTINGS["max_chunks"])]


def train_command(data: Path, run: Path, seq: int, arm: str, seed: int) -> list[str]:
    s = SETTINGS
    command = [*BERTFIT, "train", "--model", s["model"], "--train", str(data / "train.csv")]
    command += ["--eval", str(data / "dev.csv"), "--output-dir", str(run)]
    command += ["--max-seq-length", str(seq), "--batch-size", str(s["batch_size"])]
    command += ["--epochs", str(s["epochs"]), "--learning-rate", str(s["learning_rate"])]
    command += ["--warmup-ratio", str(s["warmup_ratio"]), "--seed", str(seed)]
    command += ["--class-weights", s["class_weights"], "--best-metric", s["best_metric"]]
    command += ["--no-report", "--quiet"]
    return command + arm_flags(arm)


def one_run(data: Path, seq: int, arm: str, seed: int) -> dict:
    """Trains and evaluates one (max_seq_length, arm, seed); its measurements."""
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        trained = run_measured(train_command(data, run, seq, arm, seed))
        metrics = json.loads((run / "metrics.json").read_text())
        evaluate = [*BERTFIT, "evaluate", "--run", str(run), "--data", str(data / "test.csv")]
        evaluated = run_measured([*evaluate, "--json", "--quiet"])
    test = json.loads(evaluated["stdout"])
    epochs = metrics["epochs"]
    return {
        "max_seq_length": seq,
        "arm": arm,
        "seed": seed,
        "test_accuracy": test["accuracy"],
        "test_macro_f1": test["macro_f1"],
        "test_documents": test["num_examples"],
        "dev_best": metrics.get("best"),
        "train_process_seconds": trained["seconds"],
        "train_loop_seconds": sum(e["train_seconds"] for e in epochs),
        "train_peak_rss_mib": trained["peak_rss_mib"],
        "evaluate_process_seconds": evaluated["seconds"],
        "evaluate_peak_rss_mib": evaluated["peak_rss_mib"],
        "windows": metrics.get("data", {}).get("windows"),
        "trace_counts": metrics.get("trace_counts"),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def text_profile(data: Path, seq_lengths: list[int]) -> dict:
    """What each arm reads of the test and train speeches at each max_seq_length: the share
    of their ids truncate keeps, the share chunk keeps, windows per document."""
    import numpy as np

    from bertfit.config import ModelConfig, RunConfig
    from bertfit.data.sources import read_examples
    from bertfit.data.windowed import encode_documents
    from bertfit.text.windows import WindowSpec
    from bertfit.training.setup import load_checkpoint, run_tokenizer

    config = RunConfig(model=ModelConfig(name=SETTINGS["model"]))
    tokenizer = run_tokenizer(load_checkpoint(config), config)
    profile = {}
    for split in ("train", "test"):
        texts = [e.text for e in read_examples(data / f"{split}.csv")]
        for seq in seq_lengths:
            spec = WindowSpec.for_model(
                ModelConfig(
                    max_seq_length=seq, long_documents="chunk", max_chunks=SETTINGS["max_chunks"]
                )
            )
            documents = encode_documents(tokenizer, texts, spec)
            lengths = documents.ids.row_lengths().numpy()
            total = max(int(lengths.sum()), 1)
            profile[f"{split}_{seq}"] = {
                "documents": len(texts),
                "median_ids": float(np.median(lengths)),
                "max_ids": int(lengths.max()),
                "share_longer_than_window": float((lengths > spec.content).mean()),
                "truncate_kept_share": float(np.minimum(lengths, spec.content).sum() / total),
                "chunk_kept_share": float(1 - documents.dropped_tokens.sum() / total),
                "chunk_cut_documents": int((documents.windows > spec.max_chunks).sum()),
                "chunk_mean_windows": float(documents.kept_windows.mean()),
            }
    return profile


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (max_seq_length, arm): mean, spread (min-max, sample std) over seeds."""
    rows = []
    for seq in sorted({r["max_seq_length"] for r in runs}):
        for arm in ARMS:
            group = [r for r in runs if r["max_seq_length"] == seq and r["arm"] == arm]
            if not group:
                continue
            row = {"max_seq_length": seq, "arm": arm, "seeds": sorted(r["seed"] for r in group)}
            for key in ("test_accuracy", "test_macro_f1"):
                values = [r[key] for r in group]
                row[key] = {
                    "mean": statistics.fmean(values),
                    "min": min(values),
                    "max": max(values),
                    "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                }
            row["train_process_seconds"] = statistics.fmean(
                r["train_process_seconds"] for r in group
            )
            row["train_peak_rss_mib"] = max(r["train_peak_rss_mib"] for r in group)
            rows.append(row)
    return rows


def _arm_words(arm: str) -> str:
    return "truncate" if arm == "truncate" else f"chunk, {arm} pooling"


def _spread(value: dict) -> str:
    return f"{value['mean']:.3f} ({value['min']:.3f}-{value['max']:.3f})"


def markdown_table(summary: list[dict]) -> list[str]:
    """The summary as a Markdown table (means over seeds, min-max in brackets)."""
    lines = [
        "| max_seq_length | long documents | seeds | test accuracy | test macro-F1 | "
        "train process | peak RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary:
        lines.append(
            f"| {row['max_seq_length']} | {_arm_words(row['arm'])} | {len(row['seeds'])} | "
            f"{_spread(row['test_accuracy'])} | {_spread(row['test_macro_f1'])} | "
            f"{row['train_process_seconds']:.0f} s | {row['train_peak_rss_mib']:.0f} MiB |"
        )
    return lines


def benchmark_rows(summary: list[dict]) -> list[str]:
    """Rows for BENCHMARKS.md's generated table: each chunk arm against truncate at its length."""
    rows = []
    for row in summary:
        if row["arm"] == "truncate":
            continue
        base = next(
            (
                r
                for r in summary
                if r["arm"] == "truncate" and r["max_seq_length"] == row["max_seq_length"]
            ),
            None,
        )
        if base is None:
            continue
        ours, theirs = row["test_macro_f1"], base["test_macro_f1"]
        rows.append(
            f"| long documents (convention speeches), seq {row['max_seq_length']}, "
            f"{_arm_words(row['arm'])}, {_seeds(row)}: test macro-F1, train time | "
            f"{_spread(ours)}, {row['train_process_seconds']:.0f} s | "
            f"truncate {_spread(theirs)}, {base['train_process_seconds']:.0f} s | "
            f"{ours['mean'] - theirs['mean']:+.3f} macro-F1, "
            f"{row['train_process_seconds'] / base['train_process_seconds']:.1f}x the time |"
        )
    return rows


def _seeds(row: dict) -> str:
    n = len(row["seeds"])
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _previous() -> dict:
    """The result file's runs and text profile, when they used today's SETTINGS."""
    path = RESULTS / f"{NAME}.json"
    previous = json.loads(path.read_text()) if path.is_file() else {}
    return previous if previous.get("settings") == SETTINGS else {}


def save(runs: list[dict], profile: dict) -> list[dict]:
    """Writes `runs` with those another bench process wrote meanwhile (several may run at
    once on disjoint arms; a lock keeps one reading and writing at a time); all of them."""
    RESULTS.mkdir(exist_ok=True)
    folder = os.open(RESULTS, os.O_RDONLY)  # the lock is the results folder's
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        return _merge_and_write(runs, profile)
    finally:
        os.close(folder)


def _merge_and_write(runs: list[dict], profile: dict) -> list[dict]:
    previous = _previous()
    mine = {_key(r) for r in runs}
    runs = runs + [r for r in previous.get("runs", []) if _key(r) not in mine]
    runs.sort(key=_key)
    summary = summarize(runs)
    write_result(
        NAME,
        {
            "settings": SETTINGS,
            "data": "convention speeches (bertfit.data.convention_speeches): 144/22/23",
            "commands": sorted({*previous.get("commands", []), " ".join(sys.argv[1:])}),
            "text_profile": profile,
            "runs": runs,
            "summary": summary,
            "summary_markdown": markdown_table(summary),
            "table_rows": benchmark_rows(summary),
        },
    )
    return runs


def _key(run: dict) -> tuple[int, int, int]:
    return run["max_seq_length"], ARMS.index(run["arm"]), run["seed"]


def _past(stop_at: str | None) -> bool:
    """True once the UTC clock has passed `stop_at` ("HH:MM")."""
    return stop_at is not None and time.strftime("%H:%M", time.gmtime()) >= stop_at


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-lengths", type=_ints, default=[128, 512])
    parser.add_argument("--arms", type=lambda t: t.split(","), default=list(ARMS))
    parser.add_argument("--seeds", type=_ints, default=[1, 2, 3])
    parser.add_argument("--stop-at", help="UTC HH:MM after which no new run is launched")
    parser.add_argument("--table", action="store_true", help="only print the summary table")
    args = parser.parse_args()
    previous = _previous()
    runs = previous.get("runs", [])
    if not args.table:
        data = convention_speeches_dir()
        profile = previous.get("text_profile") or text_profile(data, [128, 512])
        for seq in args.seq_lengths:
            for arm in args.arms:
                for seed in args.seeds:
                    if (seq, ARMS.index(arm), seed) in {_key(r) for r in runs}:
                        continue
                    if _past(args.stop_at):
                        print(f"stopping: it is past {args.stop_at} UTC", file=sys.stderr)
                        print("\n".join(markdown_table(summarize(runs))))
                        return
                    print(f"seq {seq}, {arm}, seed {seed} ...", file=sys.stderr, flush=True)
                    runs.append(one_run(data, seq, arm, seed))
                    runs = save(runs, profile)
    print("\n".join(markdown_table(summarize(runs))))


if __name__ == "__main__":
    main()
