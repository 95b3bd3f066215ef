"""Issue 36 quality benchmark: bertfit vs transformers' `Trainer` with the same settings
(bench.settings: MiniLM-L6, seq 64, batch 32, lr 5e-5, warmup 0.1, weight decay 0.01, 3 epochs,
best dev epoch kept), several seeds each, on the hard sets of bench.rare_labels.

    python -m bench.quality                         # every trial not yet in the results file
    python -m bench.quality --only rare/bertfit,rare/trainer --seeds 1,2,3
    python -m bench.quality --markdown              # the per-seed table of docs/quality.md

Each trial is its own process; the results file (bench/results/quality.json) is rewritten after
every trial, so a killed benchmark keeps what finished and a rerun skips it. A trial is one of
`VARIANTS`: a side (bertfit or trainer), a set, and the flags it adds to bertfit's defaults.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, machine
from bench.rare_labels import write
from bench.settings import BATCH, DECAY, LR, SEQ, WARMUP

ROOT = Path(__file__).resolve().parent.parent
OUT = RESULTS / "quality.json"
EPOCHS = 3
SEEDS = (1, 2, 3)

# name: (side, set, bertfit flags beyond the shared settings). "before" is bertfit's recipe
# before issue 36 (a zero head bias, the threshold fixed at 0.5).
BEFORE = ["--head-bias", "zero", "--tune-threshold", "false"]
VARIANTS: dict[str, tuple[str, str, list[str]]] = {
    "rare/bertfit": ("bertfit", "rare", []),
    "rare/trainer": ("trainer", "rare", []),
    "rare/bertfit-before": ("bertfit", "rare", BEFORE),
    "three/bertfit": ("bertfit", "three", []),
    "three/bertfit-advice": ("bertfit", "three", ["--class-weights", "balanced"]),
    "rare/bertfit-tune-only": ("bertfit", "rare", ["--head-bias", "zero"]),
    "rt/bertfit": ("bertfit", "rt", []),
    "rt/trainer": ("trainer", "rt", []),
}
TASKS = {"rare": "multi-label", "three": "single-label", "rt": "single-label"}


def _run(command: list[str]) -> str:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return done.stdout


def bertfit_trial(data: Path, task: str, seed: int, flags: list[str], work: Path) -> dict:
    run = work / "run"
    command = [sys.executable, "-m", "bertfit.cli", "train", "--train", str(data / "train.csv")]
    command += ["--eval", str(data / "dev.csv"), "--output-dir", str(run), "--task", task]
    command += ["--max-seq-length", str(SEQ), "--batch-size", str(BATCH), "--epochs", str(EPOCHS)]
    command += ["--learning-rate", str(LR), "--warmup-ratio", str(WARMUP)]
    command += ["--weight-decay", str(DECAY), "--seed", str(seed), "--quiet", *flags]
    _run(command)
    test = json.loads(
        _run(
            [sys.executable, "-m", "bertfit.cli", "evaluate", "--run", str(run)]
            + ["--data", str(data / "test.csv"), "--json", "--quiet"]
        )
    )
    summary = json.loads((run / "metrics.json").read_text())
    keys = ("micro_f1", "macro_f1", "accuracy", "per_label_f1", "threshold", "thresholds")
    return {
        "test": {k: test[k] for k in keys if k in test},
        "dev_epochs": [
            {k: e["eval"][k] for k in keys if k in e["eval"]} for e in summary["epochs"]
        ],
        "warnings": summary.get("final", {}).get("warnings", []),  # the collapse warning
        "command": command,
    }


def trainer_trial(data: Path, task: str, seed: int, work: Path) -> dict:
    out = work / "peer.json"
    command = [sys.executable, "-m", "bench.peer_quality", "--task", task]
    command += ["--train", str(data / "train.csv"), "--eval", str(data / "dev.csv")]
    command += ["--test", str(data / "test.csv"), "--epochs", str(EPOCHS), "--seed", str(seed)]
    command += ["--workdir", str(work / "peer"), "--out", str(out)]
    _run(command)
    return {**json.loads(out.read_text()), "command": command}


def spread(trials: dict) -> dict:
    """Mean, min and max of each test metric over a variant's seeds."""
    table = {}
    for metric in ("micro_f1", "macro_f1", "accuracy"):
        values = [t["test"][metric] for t in trials.values() if metric in t["test"]]
        if values:
            table[metric] = {
                "mean": statistics.mean(values),
                "min": min(values),
                "max": max(values),
                "seeds": len(values),
            }
    return table


def _cell(summary: dict, metric: str) -> str:
    s = summary.get(metric)
    if not s:
        return "-"
    seeds = f"{s['seeds']} seed{'s' if s['seeds'] > 1 else ''}"
    return f"{s['mean']:.3f} [{s['min']:.3f}-{s['max']:.3f}] ({seeds})"


def table_rows(results: dict) -> list[str]:
    """BENCHMARKS.md's rows: each bertfit variant against the Trainer on the same set, mean
    [worst-best] over the seeds."""
    variants, rows = results["variants"], []
    for name, variant in variants.items():
        side, dataset, flags = VARIANTS.get(name, ("?", name.split("/")[0], variant["flags"]))
        if side != "bertfit":
            continue
        peer = variants.get(f"{dataset}/trainer", {}).get("summary", {})
        for metric in (
            ("micro_f1", "macro_f1")
            if TASKS[dataset] == "multi-label"
            else (
                "macro_f1",
                "accuracy",
            )
        ):
            mine = variant["summary"].get(metric)
            if not mine:
                continue
            words = " ".join(flags) or "defaults"
            gap = f"{mine['mean'] - peer[metric]['mean']:+.3f} mean" if metric in peer else "-"
            theirs = f"{_cell(peer, metric)} (Trainer)" if metric in peer else "no Trainer run"
            rows.append(
                f"| quality: {dataset} set, test {metric}, bertfit {words} | "
                f"{_cell(variant['summary'], metric)} | {theirs} | {gap} |"
            )
    return rows


def markdown(results: dict) -> str:
    """docs/quality.md's per-seed table: one row per variant, each seed's test scores, then
    mean [min-max]."""
    lines = ["| set | variant | seed: test micro-F1 / macro-F1 (accuracy) | mean [min-max] |"]
    lines.append("|---|---|---|---|")
    for name, variant in results["variants"].items():
        dataset, label = name.split("/")
        cells = []
        for seed, trial in sorted(variant["trials"].items()):
            t = trial["test"]
            score = " / ".join(f"{t[m]:.3f}" for m in ("micro_f1", "macro_f1") if m in t)
            if "accuracy" in t:
                score += f" ({t['accuracy']:.3f})"
            if "test_tuned_threshold" in trial:  # the Trainer at bertfit's tuned threshold
                tuned = trial["test_tuned_threshold"]
                score += (
                    f" (at {tuned['threshold']}: {tuned['micro_f1']:.3f} / {tuned['macro_f1']:.3f})"
                )
            cells.append(f"{seed}: {score}")
        summary = variant["summary"]
        means = "; ".join(
            f"{metric} {s['mean']:.3f} [{s['min']:.3f}-{s['max']:.3f}]"
            for metric, s in summary.items()
        )
        flags = " ".join(variant["flags"])
        lines.append(f"| {dataset} | {label} {flags} | {'; '.join(cells)} | {means} |")
    return "\n".join(lines)


def save(results: dict) -> None:
    """Writes the results file, first merging in trials another `bench.quality` process (say,
    the Trainer's side run beside bertfit's) saved since this one read it."""
    with open(OUT.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if OUT.exists():
            for name, saved in json.loads(OUT.read_text())["variants"].items():
                variant = results["variants"].setdefault(name, {**saved, "trials": {}})
                variant["trials"] = {**saved["trials"], **variant["trials"]}
        for variant in results["variants"].values():
            variant["summary"] = spread(variant["trials"])
        results["table_rows"] = table_rows(results)
        results["command"] = "python -m bench.quality"
        results["date"] = time.strftime("%Y-%m-%d")
        tmp = OUT.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(OUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated variant names")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--markdown", action="store_true", help="print the per-seed table")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(OUT.read_text())))
        return
    results = json.loads(OUT.read_text()) if OUT.exists() else {"variants": {}}
    results["machine"] = machine()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        results["sets"] = write(data)
        for name, (side, dataset, flags) in VARIANTS.items():
            if args.only and name not in args.only.split(","):
                continue
            variant = results["variants"].setdefault(name, {"flags": flags, "trials": {}})
            for seed in map(int, args.seeds.split(",")):
                if str(seed) in variant["trials"]:
                    continue
                work = Path(tempfile.mkdtemp(dir=tmp))
                start = time.perf_counter()
                if side == "bertfit":
                    trial = bertfit_trial(data / dataset, TASKS[dataset], seed, flags, work)
                else:
                    trial = trainer_trial(data / dataset, TASKS[dataset], seed, work)
                trial["seconds"] = time.perf_counter() - start
                variant["trials"][str(seed)] = trial
                save(results)
                print(name, seed, trial["test"], f"{trial['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
