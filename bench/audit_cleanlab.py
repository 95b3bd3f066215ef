"""Issue 64 item 4: `bertfit audit` against cleanlab 2.9, both ways, on labels flipped on purpose.

For each setting (a set, its rows, the fraction flipped) and seed:
1. A seeded draw of the set's rows with that fraction of labels flipped (Rotten Tomatoes: to
   the other label; the debates: between the confusable speakers, Trump and Pence, Clinton and
   Kaine, the moderators never flipped).
2. One sweep, `bertfit audit --train noisy.csv --folds K --seeds 2` (MiniLM-L6, the recipe
   below): its first seed's out-of-fold probabilities are a plain one-seed k-fold, what a
   cleanlab user computes; bertfit's audit averages both seeds (its end-to-end default).
3. Scored against the flipped rows, precision and recall at k = the number flipped and of the
   default flagged set:
   - `same_probabilities`: bertfit's ranking and cleanlab's `find_label_issues(labels,
     pred_probs, return_indices_ranked_by="self_confidence")` on the one-seed probabilities;
   - `end_to_end`: `bertfit audit --from SWEEP` (its defaults) against cleanlab on the one-seed
     probabilities.
4. Test accuracy of models trained with the same recipe on (i) the noisy labels, (ii) minus
   bertfit's flagged rows, (ii') minus cleanlab's, (iii) the clean labels.

With `--learning-rates A,B` the audit's sweep tries each rate (the recipe's first, whose first
seed stays cleanlab's plain k-fold) and bertfit's audit takes every fold's rows from the rate
that fold's own validation slice chose (`bertfit.sweeps.fold_choice`); a setting of its own.

    python -m bench.audit_cleanlab --set rotten-tomatoes --rows 3000 --noise 0.05,0.1,0.2
    python -m bench.audit_cleanlab --set debates --noise 0.05 --seeds 1,2,3
    python -m bench.audit_cleanlab --rows 3000 --noise 0.05 --learning-rates 5e-5,1e-4
    python -m bench.audit_cleanlab --markdown

Precision at k counts the hits among the first k rows of a tool's ranking over k (bertfit's: the
whole ranking, `--flag all`; cleanlab's: its flagged rows, in order); recall at k is the same
number, k being the number flipped. The default set is what each flags by default.
Results: bench/results/audit_cleanlab.json, rewritten after every step; a rerun skips what is
recorded (`--rescore`: scores it again), and `--work DIR` keeps the sweeps (their out-of-fold
probabilities, `oof.npz`; the fold runs' checkpoints pruned) and runs for a rerun or another
look.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.audit import _cell as _cell_of_seeds
from bench.audit import _run, _spread, _write_csv
from bench.common import RESULTS, machine
from bench.settings import BATCH, WARMUP

OUT = RESULTS / "audit_cleanlab.json"
SETS = ("rotten-tomatoes", "debates")
CONFUSABLE = {"trump": "pence", "pence": "trump", "clinton": "kaine", "kaine": "clinton"}
# (sequence length, epochs, learning rate, folds): the debates' statements are longer and fewer
RECIPES = {"rotten-tomatoes": (64, 3, 5e-5, 4), "debates": (128, 4, 5e-5, 4)}
SWEEP_SEEDS = 2
TOOLS = ("bertfit", "cleanlab")
TRAINED = ("noisy", "without_bertfit", "without_cleanlab", "clean")


def set_rows(name: str) -> tuple[list[tuple[str, str]], Path | None]:
    """The set's (text, label) rows to draw from, and its test file."""
    if name == "rotten-tomatoes":
        from bertfit.data.rotten_tomatoes import load_rotten_tomatoes, rotten_tomatoes_dir

        rows = [(text, str(label)) for text, label in load_rotten_tomatoes("train")]
        return rows, rotten_tomatoes_dir() / "test.csv"
    from bench.fewshot import cache_root, debates

    debates("test")  # cached as pool.csv and test.csv
    return debates("pool"), cache_root() / "presidential_debates" / "test.csv"


def flip(rows: list[tuple[str, str]], size: int | None, noise: float, seed: int):
    """(clean rows, noisy rows, flipped indices): `size` rows drawn (all when None), then
    round(noise × size) of the flippable ones given their confusable (or other) label."""
    rng = np.random.default_rng(seed)
    chosen = rows if size is None else [rows[i] for i in sorted(rng.choice(len(rows), size, False))]
    labels = sorted({label for _, label in rows})
    partner = CONFUSABLE if len(labels) > 2 else dict(zip(labels, labels[::-1], strict=True))
    flippable = [i for i, (_, label) in enumerate(chosen) if label in partner]
    flipped = np.sort(rng.choice(flippable, round(noise * len(chosen)), replace=False))
    noisy = list(chosen)
    for i in flipped:
        noisy[i] = (chosen[i][0], partner[chosen[i][1]])
    return chosen, noisy, flipped


def train_flags(name: str, seed: int, grid: list[float] | None = None) -> list[str]:
    """The recipe's flags; `grid`: learning rates for the audit's sweep (the recipe's first)."""
    seq, epochs, lr, _ = RECIPES[name]
    rates = ",".join(map(str, grid or [lr]))
    return [
        "--max-seq-length", str(seq), "--batch-size", str(BATCH), "--epochs", str(epochs),
        "--learning-rate", rates, "--warmup-ratio", str(WARMUP), "--pooling", "mean",
        "--seed", str(seed), "--quiet", "--no-report",
    ]  # fmt: skip


def learning_rates(text: str | None, name: str) -> list[float] | None:
    """--learning-rates: the recipe's rate first (its one-seed k-fold is cleanlab's), or None."""
    if not text:
        return None
    rates = [float(r) for r in text.split(",")]
    recipe = RECIPES[name][2]
    return [recipe] + [r for r in rates if r != recipe]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertfit.cli", *args]


def prune_checkpoints(sweep: Path) -> None:
    """Removes the fold runs' checkpoints once the audit has read their out-of-fold predictions
    (about 350 MB a MiniLM fold run: a kept --work fills a disk in a few settings); a rerun
    keeps the finished runs by their metrics.json and predictions."""
    for checkpoints in sweep.glob("runs/*/*/checkpoints"):
        shutil.rmtree(checkpoints)


def out_of_fold(sweep: Path) -> tuple[list[str], np.ndarray, list[np.ndarray]]:
    """(labels, given ids, each seed's probabilities) of the sweep's first trial (the recipe's
    learning rate)."""
    first = sorted(p for p in (sweep / "runs").iterdir() if p.is_dir())[0]
    files = sorted(first.glob("oof-seed*.jsonl"))
    # split on "\n" alone: a text may hold U+0085 or U+2028, which str.splitlines splits on
    per_seed = [
        [json.loads(line) for line in f.read_text(encoding="utf-8").split("\n") if line]
        for f in files
    ]
    labels = list(per_seed[0][0]["probabilities"])
    given = np.array([labels.index(r["target"]) for r in per_seed[0]])
    probabilities = [
        np.array([[r["probabilities"][label] for label in labels] for r in seed])
        for seed in per_seed
    ]
    return labels, given, probabilities


def scores(ranked: list[int], flipped: np.ndarray, estimated: float | None = None) -> dict:
    """The flagged rows (most likely wrong first) against the flipped ones."""
    truth = set(flipped.tolist())
    hits = len(set(ranked) & truth)
    k = len(truth)
    return {
        "flagged": len(ranked),
        "precision": hits / len(ranked) if ranked else None,
        "recall": hits / k,
        "precision_at_k": len(set(ranked[:k]) & truth) / k,  # and recall at k: k flipped
        **({"estimated_wrong": estimated} if estimated is not None else {}),
    }


def cleanlab_ranked(given: np.ndarray, probabilities: np.ndarray) -> tuple[list[int], int]:
    """cleanlab's default label issues, ranked by self-confidence, and its default estimate."""
    from cleanlab.count import num_label_issues
    from cleanlab.filter import find_label_issues

    ranked = find_label_issues(given, probabilities, return_indices_ranked_by="self_confidence")
    return [int(i) for i in ranked], int(num_label_issues(given, probabilities))


def bertfit_ranked(given: np.ndarray, probabilities: np.ndarray) -> tuple[list[int], float]:
    """bertfit's default flagging and ranking on these probabilities (no training)."""
    from bertfit.sweeps.confident import find_label_issues

    found = find_label_issues(given, probabilities, "prune-by-noise-rate", "self-confidence")
    return [int(i) for i in found.ranked], found.estimated_wrong


def audit_end_to_end(sweep: Path, output: Path, *flags: str) -> tuple[list[int], dict]:
    """`bertfit audit --from SWEEP` with its defaults and `flags`: the flagged rows in rank
    order, and the summary."""
    if output.exists():
        shutil.rmtree(output)
    summary = json.loads(_run(cli("audit", "--from", str(sweep), "--output", str(output),
                                  "--json", "--no-report", *flags)))  # fmt: skip
    import csv

    with open(output / "issues.csv", encoding="utf-8", newline="") as f:
        return [int(r["row"]) for r in csv.DictReader(f)], summary


def test_accuracy(name: str, train: Path, test: Path, seed: int, work: Path) -> float:
    """A model trained on `train` with the recipe, scored on `test` (the run kept per file)."""
    digest = hashlib.sha1(train.read_bytes()).hexdigest()[:12]
    run = work / f"run-{digest}"
    if not (run / "metrics.json").exists():
        if run.exists():
            shutil.rmtree(run)
        kind = ["--format", "jsonl"] if train.suffix == ".jsonl" else []
        _run(cli("train", "--train", str(train), *kind, "--output-dir", str(run),
                 *train_flags(name, seed)))  # fmt: skip
    found = _run(cli("evaluate", "--run", str(run), "--data", str(test), "--json", "--quiet"))
    return json.loads(found)["accuracy"]


def one_seed(args, name: str, rows, test: Path, noise: float, seed: int, work: Path, save):
    clean, noisy, flipped = flip(rows, args.rows, noise, seed)
    work.mkdir(parents=True, exist_ok=True)
    clean_file = _write_csv(work / "clean.csv", clean)
    noisy_file = _write_csv(work / "noisy.csv", noisy)
    sweep = work / "sweep"
    result = {"seed": seed, "rows": len(noisy), "flipped": len(flipped)}
    start = time.perf_counter()
    folds = str(RECIPES[name][3])
    _run(cli("audit", "--train", str(noisy_file), "--folds", folds, "--seeds",
             str(SWEEP_SEEDS), "--output-dir", str(sweep), "--json", "--no-report",
             *train_flags(name, seed, args.learning_rates)))  # fmt: skip
    result["sweep_seconds"] = round(time.perf_counter() - start, 1)
    prune_checkpoints(sweep)
    labels, given, per_seed = out_of_fold(sweep)
    np.savez(work / "oof.npz", given=given, flipped=flipped, seeds=np.stack(per_seed))
    one = per_seed[0]
    result["out_of_fold_accuracy"] = {"one_seed": float(np.mean(one.argmax(1) == given))}
    cleanlab, cleanlab_estimate = cleanlab_ranked(given, one)
    ours, our_estimate = bertfit_ranked(given, one)
    cleanlab_scores = scores(cleanlab, flipped, cleanlab_estimate)  # the same both ways
    result["same_probabilities"] = {
        "bertfit": scores(ours, flipped, our_estimate),
        "cleanlab": cleanlab_scores,
    }
    flagged, summary = audit_end_to_end(sweep, work / "audit-default")
    ranking, _ = audit_end_to_end(sweep, work / "audit-all", "--flag", "all")
    bertfit = scores(flagged, flipped, summary["estimated_wrong"])
    result["out_of_fold_accuracy"]["audited"] = summary["out_of_fold_accuracy"]
    if "per_fold_choice" in summary:
        result["per_fold_choice"] = summary["per_fold_choice"]["choices"]
    result["end_to_end"] = {
        "bertfit": {
            **bertfit,
            "precision_at_k": scores(ranking, flipped)["precision_at_k"],
            "wrong_labels_seen": summary.get("wrong_labels_seen"),
            "warning": summary.get("warning"),
        },  # fmt: skip
        "cleanlab": cleanlab_scores,
    }
    save(result)
    dropped = set(cleanlab)
    without_cleanlab = _write_csv(
        work / "without-cleanlab.csv", [r for i, r in enumerate(noisy) if i not in dropped]
    )
    trains = {
        "noisy": noisy_file,
        "without_bertfit": work / "audit-default" / "train-without-issues.jsonl",
        "without_cleanlab": without_cleanlab,
        "clean": clean_file,
    }
    result["test_accuracy"] = {}
    for model in TRAINED:
        result["test_accuracy"][model] = test_accuracy(name, trains[model], test, seed, work)
        save(result)
    return result


def summarize(seeds: list[dict]) -> dict:
    out: dict = {}
    for way in ("same_probabilities", "end_to_end"):
        for tool in TOOLS:
            done = [s[way][tool] for s in seeds if way in s]
            for key in ("precision_at_k", "flagged", "precision", "recall"):
                values = [d[key] for d in done if d.get(key) is not None]
                if values:
                    out[f"{way}.{tool}.{key}"] = _spread(values)
    for model in TRAINED:
        values = [s["test_accuracy"][model] for s in seeds if model in s.get("test_accuracy", {})]
        if values:
            out[f"test_accuracy.{model}"] = _spread(values)
    return out


def _cell(summary: dict, key: str, digits: int = 3) -> str:
    return _cell_of_seeds(summary, key, digits).removesuffix(" (1 seed)")  # the seeds column


def markdown(document: dict) -> str:
    """BENCHMARKS.md's and docs/audit.md's tables: mean ± sd over the seeds."""
    ranking = [
        "| setting | seeds | same probabilities: P@k bertfit / cleanlab | end to end: P@k "
        "bertfit / cleanlab | default set: flagged, precision, recall (bertfit; cleanlab) |",
        "|---|---|---|---|---|",
    ]
    accuracy = [
        "| setting | seeds | (i) noisy | (ii) minus bertfit's | (ii) minus cleanlab's | "
        "(iii) clean |",
        "|---|---|---|---|---|---|",
    ]
    for name, setting in document["settings"].items():
        s = setting["summary"]
        seeds = ",".join(str(r["seed"]) for r in setting["seeds"])

        def both(key: str, digits: int = 3, s: dict = s) -> str:
            ours, theirs = (_cell(s, f"end_to_end.{tool}.{key}", digits) for tool in TOOLS)
            return f"{ours}; {theirs}"

        ranking.append(
            f"| {name} | {seeds} | {_cell(s, 'same_probabilities.bertfit.precision_at_k')} / "
            f"{_cell(s, 'same_probabilities.cleanlab.precision_at_k')} | "
            f"{_cell(s, 'end_to_end.bertfit.precision_at_k')} / "
            f"{_cell(s, 'end_to_end.cleanlab.precision_at_k')} | {both('flagged', 0)}, "
            f"{both('precision')}, {both('recall')} |"
        )
        accuracy.append(
            f"| {name} | {seeds} | "
            + " | ".join(_cell(s, f"test_accuracy.{m}") for m in TRAINED)
            + " |"
        )
    return "\n".join(ranking) + "\n\n" + "\n".join(accuracy) + "\n"


def table_rows(document: dict) -> list[str]:
    """BENCHMARKS.md's summary rows (bench/run.py): per setting, precision at k both ways."""
    rows = []
    for name, setting in document["settings"].items():
        s = setting["summary"]
        if "end_to_end.bertfit.precision_at_k" not in s:
            continue
        rows.append(
            f"| label audit vs cleanlab, {name}: precision at k end to end (same "
            f"probabilities) | {_cell(s, 'end_to_end.bertfit.precision_at_k')} "
            f"({_cell(s, 'same_probabilities.bertfit.precision_at_k')}) | "
            f"{_cell(s, 'end_to_end.cleanlab.precision_at_k')} "
            f"({_cell(s, 'same_probabilities.cleanlab.precision_at_k')}) | - |"
        )
    return rows


def with_command(recorded: str | None, command: str) -> str:
    """A setting's commands: every one that added a seed to it, once each, in order (a later
    seed's run does not hide how the earlier ones were made)."""
    return "; ".join(dict.fromkeys([*(recorded.split("; ") if recorded else []), command]))


def write(path: Path, document: dict) -> None:
    """The results file, with what bench/run.py reads (command, date, table rows) derived."""
    settings = document["settings"].values()
    document["command"] = "; ".join(
        dict.fromkeys(c for s in settings for c in s["command"].split("; "))
    )
    document["date"] = max(s["date"] for s in settings)
    document["table_rows"] = table_rows(document)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=SETS, default="rotten-tomatoes")
    parser.add_argument("--rows", type=int, help="rows drawn from the set (default: all)")
    parser.add_argument("--noise", default="0.05", help="comma-separated fractions flipped")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
    parser.add_argument(
        "--learning-rates",
        help="comma-separated: the audit's sweep tries each and every fold keeps the one its "
        "validation slice chose (the recipe's rate is the plain k-fold cleanlab gets)",
    )
    parser.add_argument("--work", type=Path, help="keep the sweeps and runs here")
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--markdown", action="store_true", help="print the tables and exit")
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="score recorded seeds again from --work (a changed audit; retrains what changed)",
    )
    args = parser.parse_args()
    document = json.loads(args.output.read_text()) if args.output.exists() else {}
    if args.markdown:
        print(markdown(document), end="")
        return
    rows, test = set_rows(args.set)
    settings = document.setdefault("settings", {})
    command = " ".join(["python -m bench.audit_cleanlab", *sys.argv[1:]])
    args.learning_rates = learning_rates(args.learning_rates, args.set)
    grid = "" if args.learning_rates is None else ",".join(f"{r:g}" for r in args.learning_rates)
    for noise in (float(n) for n in args.noise.split(",")):
        epochs = RECIPES[args.set][1]
        name = f"{args.set}, {args.rows or len(rows)} rows, {noise:.0%} flipped, {epochs} epochs"
        name += f", learning rate {grid} chosen per fold" if grid else ""
        results = {s["seed"]: s for s in settings.get(name, {}).get("seeds", [])}

        def save(result: dict, name=name, results=results) -> None:
            results[result["seed"]] = result
            seeds = [results[k] for k in sorted(results)]
            seq, epochs, lr, folds = RECIPES[args.set]
            settings[name] = {
                "command": with_command(settings.get(name, {}).get("command"), command),
                "date": time.strftime("%Y-%m-%d"),
                "recipe": {"model": "minilm-l6", "max_seq_length": seq, "epochs": epochs,
                           "learning_rate": args.learning_rates or lr, "folds": folds,
                           "sweep_seeds": SWEEP_SEEDS,
                           "batch_size": BATCH, "pooling": "mean"},
                "summary": summarize(seeds), "seeds": seeds,
            }  # fmt: skip
            document.update(machine=machine(), settings=settings)
            write(args.output, document)

        for seed in (int(s) for s in args.seeds.split(",")):
            done = len(results.get(seed, {}).get("test_accuracy", {})) == len(TRAINED)
            if done and not args.rescore:
                continue
            label = f"{args.set}-{args.rows or 'all'}-{noise}-{epochs}ep-{seed}"
            label += f"-lr{grid}" if grid else ""
            if args.work:
                one_seed(args, args.set, rows, test, noise, seed, args.work / label, save)
                continue
            with tempfile.TemporaryDirectory(prefix=f"audit-cleanlab-{label}-") as work:
                one_seed(args, args.set, rows, test, noise, seed, Path(work), save)


if __name__ == "__main__":
    main()
