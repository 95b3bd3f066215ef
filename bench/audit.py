"""Issue 49 label-audit benchmark: `bertfit audit` on Rotten Tomatoes with 5% of the training
labels flipped at random.

For each seed: a seeded subset of the training split (--rows), 5% of its labels flipped (seeded);
`bertfit audit --folds K` on the noisy file (K fold runs of MiniLM-L6, out-of-fold predictions,
confident learning); precision and recall of the flagged rows against the flipped ones; then three
models trained with the same settings and scored on the whole test split: on the noisy labels,
on the noisy labels without the flagged rows (the audit's train-without-issues.jsonl), and on the
clean labels.

    python -m bench.audit                          # seeds 1 and 2, 3000 rows, 4 folds, 1 epoch
    python -m bench.audit --rows 5000 --epochs 2   # another experiment, kept beside it

Affordable on a shared 2-core CPU: one epoch, sequence length 64 (the longest snippet is 53
words), a subset of the training rows. bench/results/audit.json holds one experiment per setting
(rows, epochs, folds, pooling) and is rewritten after every step, so a killed benchmark keeps
what finished; a rerun skips the seeds already complete.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import RESULTS, machine
from bench.settings import BATCH, SEQ, WARMUP

ROOT = Path(__file__).resolve().parent.parent
OUT = RESULTS / "audit.json"
NOISE = 0.05
MODELS = ("noisy", "without_flagged", "clean")


def _run(command: list[str]) -> str:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        )
    return done.stdout


def _write_csv(path: Path, rows: list[tuple[str, int]]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


def noisy_subset(
    rows: list[tuple[str, int]], size: int, seed: int
) -> tuple[list[tuple[str, int]], list[tuple[str, int]], np.ndarray]:
    """(clean rows, noisy rows, indices of the flipped rows): `size` rows drawn at random,
    then round(5%) of them with the other label."""
    rng = np.random.default_rng(seed)
    chosen = [rows[i] for i in sorted(rng.choice(len(rows), size, replace=False))]
    flipped = np.sort(rng.choice(size, round(NOISE * size), replace=False))
    noisy = list(chosen)
    for i in flipped:
        text, label = noisy[i]
        noisy[i] = (text, 1 - label)
    return chosen, noisy, flipped


def _train_flags(args, seed: int) -> list[str]:
    return [
        "--max-seq-length", str(SEQ), "--batch-size", str(BATCH), "--epochs", str(args.epochs),
        "--learning-rate", str(args.learning_rate), "--warmup-ratio", str(WARMUP),
        "--pooling", args.pooling, "--seed", str(seed), "--quiet", "--no-report",
    ]  # fmt: skip


def _test_accuracy(args, train: Path, seed: int, work: Path, name: str) -> float:
    run = work / f"run-{name}"
    cli = [sys.executable, "-m", "bertfit.cli"]
    _run(
        [*cli, "train", "--train", str(train), "--output-dir", str(run), *_train_flags(args, seed)]
    )
    test = json.loads(
        _run([*cli, "evaluate", "--run", str(run), "--data", str(args.test), "--json", "--quiet"])
    )
    return test["accuracy"]


def one_seed(args, rows: list[tuple[str, int]], seed: int, work: Path, save) -> dict:
    clean, noisy, flipped = noisy_subset(rows, args.rows, seed)
    clean_file = _write_csv(work / "clean.csv", clean)
    noisy_file = _write_csv(work / "noisy.csv", noisy)
    result: dict = {"seed": seed, "rows": args.rows, "flipped": len(flipped)}
    start = time.perf_counter()
    command = [sys.executable, "-m", "bertfit.cli", "audit", "--train", str(noisy_file)]
    command += ["--folds", str(args.folds), "--output-dir", str(work / "audit"), "--json"]
    summary = json.loads(_run(command + _train_flags(args, seed)))
    result["audit_seconds"] = round(time.perf_counter() - start, 1)
    result.update(_scores(Path(summary["output"]), flipped, summary))
    # the other flagging rule on the same out-of-fold predictions: no training
    other = work / "audit-confident-joint"
    command = [sys.executable, "-m", "bertfit.cli", "audit", "--from", str(work / "audit")]
    command += ["--method", "confident-joint", "--output", str(other), "--json", "--no-report"]
    result["confident_joint"] = _scores(other, flipped, json.loads(_run(command)))
    save(result)
    trains = {
        "noisy": noisy_file,
        "without_flagged": Path(summary["output"]) / "train-without-issues.jsonl",
        "clean": clean_file,
    }
    result["test_accuracy"] = {}
    for name in MODELS:
        result["test_accuracy"][name] = _test_accuracy(args, trains[name], seed, work, name)
        save(result)
    return result


def _scores(audit: Path, flipped: np.ndarray, summary: dict) -> dict:
    """Precision and recall of the flagged rows against the flipped ones, and the precision of
    the top len(flipped) flagged rows (the ranking, whatever the number flagged)."""
    with open(audit / "issues.csv", encoding="utf-8", newline="") as f:
        issues = [int(r["row"]) for r in csv.DictReader(f)]
    truth = set(flipped.tolist())
    hits = len(set(issues) & truth)
    top = issues[: len(truth)]
    return {
        "flagged": len(issues),
        "estimated_wrong": summary["estimated_wrong"],
        "true_positives": hits,
        "precision": hits / len(issues) if issues else None,
        "recall": hits / len(truth),
        "precision_at_flipped_count": len(set(top) & truth) / len(top) if top else None,
    }


def _spread(values: list[float]) -> dict:
    return {
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }


def summarize(seeds: list[dict]) -> dict:
    done = [s for s in seeds if len(s.get("test_accuracy", {})) == len(MODELS)]
    audited = [s for s in seeds if "precision" in s]
    out = {}
    keys = ("precision", "recall", "precision_at_flipped_count", "flagged", "estimated_wrong")
    for key in keys:
        values = [s[key] for s in audited if s.get(key) is not None]
        if values:
            out[key] = _spread(values)
        values = [s["confident_joint"][key] for s in audited if "confident_joint" in s]
        if values and None not in values:
            out[f"confident_joint_{key}"] = _spread(values)
    for name in MODELS:
        values = [s["test_accuracy"][name] for s in done]
        if values:
            out[f"test_accuracy_{name}"] = _spread(values)
    return out


def _cell(summary: dict, key: str, digits: int = 3) -> str:
    found = summary.get(key)
    if found is None:
        return "-"
    n = len(found["values"])
    if n == 1:
        return f"{found['mean']:.{digits}f} (1 seed)"
    return f"{found['mean']:.{digits}f} ± {found['sd']:.{digits}f}"


def markdown(document: dict) -> str:
    """The tables of docs/audit.md and BENCHMARKS.md: mean ± sd over the seeds of each
    experiment (the audit; then the test accuracy of the three retrained models)."""
    audit = [
        "| experiment | seeds | flagged (of 150 flipped) | precision | recall | precision of "
        "the top 150 | confident-joint: flagged, precision, recall |",
        "|---|---|---|---|---|---|---|",
    ]
    accuracy = [
        "| experiment | seeds | noisy labels | without the flagged rows | clean labels |",
        "|---|---|---|---|---|",
    ]
    for name, experiment in document["experiments"].items():
        s, seeds = experiment["summary"], [r["seed"] for r in experiment["seeds"]]
        other = ", ".join(
            _cell(s, f"confident_joint_{k}", 0 if k == "flagged" else 3)
            for k in ("flagged", "precision", "recall")
        )
        audit.append(
            f"| {name} | {','.join(map(str, seeds))} | {_cell(s, 'flagged', 0)} | "
            f"{_cell(s, 'precision')} | {_cell(s, 'recall')} | "
            f"{_cell(s, 'precision_at_flipped_count')} | {other} |"
        )
        done = [r["seed"] for r in experiment["seeds"] if len(r.get("test_accuracy", {})) == 3]
        accuracy.append(
            f"| {name} | {','.join(map(str, done)) or '-'} | "
            + " | ".join(_cell(s, f"test_accuracy_{m}") for m in MODELS)
            + " |"
        )
    return "\n".join(audit) + "\n\n" + "\n".join(accuracy) + "\n"


def table_rows(document: dict) -> list[str]:
    """BENCHMARKS.md's rows (bench/run.py): per experiment, the audit's precision and recall,
    and the test accuracy without the flagged rows against the noisy labels."""
    rows = []
    for name, experiment in document["experiments"].items():
        s = experiment["summary"]
        if "precision" not in s:
            continue
        rows.append(
            f"| label audit, RT {name}, 5% flipped: flagged rows' precision / recall | "
            f"{_cell(s, 'precision')} / {_cell(s, 'recall')} ({_cell(s, 'flagged', 0)} "
            "flagged) | - | - |"
        )
        if "test_accuracy_noisy" in s:
            gain = s["test_accuracy_without_flagged"]["mean"] - s["test_accuracy_noisy"]["mean"]
            rows.append(
                f"| label audit, RT {name}: test accuracy retrained without the flagged rows | "
                f"{_cell(s, 'test_accuracy_without_flagged')} | noisy labels "
                f"{_cell(s, 'test_accuracy_noisy')}; clean {_cell(s, 'test_accuracy_clean')} | "
                f"{gain:+.3f} |"
            )
    return rows


def _write(path: Path, document: dict) -> None:
    """The results file with its derived parts (summaries, BENCHMARKS.md rows) recomputed."""
    for experiment in document["experiments"].values():
        experiment["summary"] = summarize(experiment["seeds"])
    experiments = document["experiments"].values()
    document["command"] = "; ".join(e["command"] for e in experiments)
    document["date"] = max(e["date"] for e in experiments)
    document["table_rows"] = table_rows(document)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2", help="comma-separated seeds (default 1,2)")
    parser.add_argument("--rows", type=int, default=3000, help="training rows used (default 3000)")
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--pooling", default="mean", help="mean (default: as `make demo`) or cls")
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument(
        "--markdown", action="store_true", help="print the results' tables and exit"
    )
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="recompute the results file's summaries and table rows, and exit (runs nothing)",
    )
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.output.read_text())), end="")
        return
    if args.refresh:
        _write(args.output, json.loads(args.output.read_text()))
        return
    from bertfit.data.rotten_tomatoes import load_rotten_tomatoes, rotten_tomatoes_dir

    rows = load_rotten_tomatoes("train")
    args.test = rotten_tomatoes_dir() / "test.csv"
    document = json.loads(args.output.read_text()) if args.output.exists() else {}
    settings = {
        "rows": args.rows, "folds": args.folds, "epochs": args.epochs, "noise": NOISE,
        "learning_rate": args.learning_rate, "pooling": args.pooling, "max_seq_length": SEQ,
        "batch_size": BATCH, "warmup_ratio": WARMUP, "model": "minilm-l6",
        "method": "prune-by-noise-rate", "rank_by": "self-confidence", "test_rows": 1283,
    }  # fmt: skip
    name = f"{args.rows} rows, {args.epochs} epoch(s), {args.folds} folds, {args.pooling} pooling"
    experiments = document.get("experiments", {})
    kept = experiments.get(name, {}).get("seeds", [])
    results = {s["seed"]: s for s in kept}
    command = " ".join(["python -m bench.audit", *sys.argv[1:]])

    def save(result: dict) -> None:
        results[result["seed"]] = result
        seeds = [results[k] for k in sorted(results)]
        experiments[name] = {
            "command": command, "date": time.strftime("%Y-%m-%d"), "settings": settings,
            "summary": summarize(seeds), "seeds": seeds,
        }  # fmt: skip
        document.update(machine=machine(), experiments=experiments)
        _write(args.output, document)

    for seed in (int(s) for s in args.seeds.split(",")):
        if len(results.get(seed, {}).get("test_accuracy", {})) == len(MODELS):
            continue
        with tempfile.TemporaryDirectory(prefix=f"audit-bench-{seed}-") as work:
            one_seed(args, rows, seed, Path(work), save)
        print(json.dumps(summarize([results[k] for k in sorted(results)]), indent=2))


if __name__ == "__main__":
    main()
