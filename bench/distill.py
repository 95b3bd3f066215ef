"""Issue 49 benchmark: `bertfit distill` on Rotten Tomatoes. A MiniLM-L6 teacher (6 layers)
fine-tuned on the first N training rows; students of 3 layers (the teacher's 0, 2, 4):

- direct: MiniLM's own layers 0, 2, 4 (not fine-tuned) trained on the labels (`bertfit train`);
- distilled: `bertfit distill --student-layers 3` (the fine-tuned teacher's layers; T 2, soft
  weight 0.5);
- distilled + unlabelled: the same, with the next N training texts given without labels;
- teacher layers, labels only: `--soft-weight 0`: the teacher's layers, no soft labels (what the
  start alone is worth).

    python -m bench.distill                          # 3,000 rows, 1 epoch, seed 42
    python -m bench.distill --seeds 42,43,44 --rows 3000
    python -m bench.distill --rows 10205 --epochs 3 --result distill_small \
        --students small,small_narrow                # issue 64: a third the size

Beside those four, smaller students (issue 64), each of the teacher's layers 0 and 3:
- small: `--student-layers 2 --prune-vocab` (the word embeddings of the tokens the rows use);
- small_whole_vocabulary: `--student-layers 2` (what the pruning costs);
- small_narrow: the same with `--student-intermediate-size 384` (a quarter of each
  feed-forward's neurons);
- small_narrow_768: the same with 768 neurons;
- small_narrow_6_epochs, small_narrow_lr_1e-4: small_narrow trained 6 epochs, or at a
  learning rate of 1e-4;
- small_narrow_augmented: small_narrow_lr_1e-4 with two copies of each training text, each
  word dropped with probability 0.2, as `--unlabelled` texts the teacher labels (the copies
  `--augment 2` makes, bertfit.distill.augment, drawn with seed 0);
- half_augmented: the default student (3 of 6 layers, the whole vocabulary) with them.

Every run: max_seq_length 64, batch 32, learning rate 5e-5, 10% warmup, 1 epoch (bench/settings.py
but the epochs), each in a process of its own. Measured: test accuracy (1,283 rows), predict
throughput from raw text to probabilities in one process (teacher and students alternated, median
of 3 passes over the test texts, batch 32), parameters and the SavedModel's size on disk. The
result is rewritten after every run, so a stopped benchmark keeps what it measured.
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

from bench.common import RESULTS, write_result
from bench.settings import BATCH, DECAY, LR, SEQ, WARMUP
from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir
from bertfit.data.sources import Example
from bertfit.distill.augment import augmented
from bertfit.runs.records import FINISHED
from bertfit.runs.run_dir import RunDir

ROOT = Path(__file__).resolve().parent.parent
BERTFIT = [sys.executable, "-m", "bertfit.cli"]
LAYERS = [0, 2, 4]
STUDENTS = ("direct", "distilled", "distilled_unlabelled", "teacher_layers_labels_only")
SMALL = ["--student-layers", "2", "--prune-vocab"]
NARROW = [*SMALL, "--student-intermediate-size", "384"]
SMALL_STUDENTS = {  # their flags come after the training flags: they may override them
    "small": SMALL,
    "small_whole_vocabulary": ["--student-layers", "2"],
    "small_narrow": NARROW,
    "small_narrow_768": [*SMALL, "--student-intermediate-size", "768"],
    "small_narrow_6_epochs": [*NARROW, "--epochs", "6"],
    "small_narrow_lr_1e-4": [*NARROW, "--learning-rate", "1e-4"],
    "small_narrow_augmented": [*NARROW, "--learning-rate", "1e-4"],  # and --unlabelled
    # the default student (half the teacher's layers, whole vocabulary) with them
    "half_augmented": [],
}


def bertfit(*args: str) -> dict:
    """Runs a bertfit command; its JSON line and wall seconds."""
    start = time.perf_counter()
    done = subprocess.run([*BERTFIT, *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"bertfit {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    return {"seconds": time.perf_counter() - start, **printed}


def training_flags(seed: int, epochs: int) -> list[str]:
    return [
        *("--max-seq-length", str(SEQ), "--batch-size", str(BATCH), "--epochs", str(epochs)),
        *("--learning-rate", str(LR), "--warmup-ratio", str(WARMUP), "--weight-decay"),
        *(str(DECAY), "--seed", str(seed), "--quiet", "--no-report", "--json"),
    ]


def write_rows(path: Path, rows: list[list[str]], labelled: bool = True) -> Path:
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["text", "label"] if labelled else ["text"])
        writer.writerows(rows if labelled else [[r[0]] for r in rows])
    return path


def pretrained_cut(work: Path) -> Path:
    """MiniLM-L6's own layers 0, 2, 4: the start of the student trained without the teacher."""
    from bertfit.checkpoints.load import build_encoder, read_checkpoint
    from bertfit.checkpoints.registry import resolve
    from bertfit.distill.student import write_student

    source = resolve("minilm-l6")
    return write_student(build_encoder(read_checkpoint(source)), source, LAYERS, work / "cut")


def train_runs(names, args, work: Path, seed: int, data: dict) -> dict:
    """Trains the named models of one seed (the teacher first, unless the work folder holds its
    finished run already); their JSON lines."""
    flags = training_flags(seed, args.epochs)
    teacher = str(work / f"teacher-{seed}")
    distill = ["distill", "--teacher", teacher]
    three = [*distill, "--student-layers", "3"]
    commands = {
        "teacher": ["train", "--train", data["train"]],
        "direct": ["train", "--train", data["train"], "--model", data["cut"]],
        "distilled": three,
        "distilled_unlabelled": [*three, "--unlabelled", data["unlabelled"]],
        "teacher_layers_labels_only": [*three, "--soft-weight", "0"],
        **{name: distill for name in SMALL_STUDENTS},
        "small_narrow_augmented": [*distill, "--unlabelled", data["augmented"]],
        "half_augmented": [*distill, "--unlabelled", data["augmented"]],
    }
    out = {}
    for name in names:
        if name == "teacher" and RunDir(teacher).status() == FINISHED:
            out[name] = {"seconds": None, "run_dir": teacher, "reused": True}
            continue
        output = teacher if name == "teacher" else str(work / f"{name}-{seed}")
        student = SMALL_STUDENTS.get(name, [])
        out[name] = bertfit(*commands[name], "--output-dir", output, *flags, *student)
    return out


def measure(run_dirs: dict[str, str], test: Path, work: Path) -> dict:
    """Accuracy on the test split, predict throughput (alternated, median of 3), parameters and
    the SavedModel's size of each run."""
    from bertfit.export.serving import export_classifier
    from bertfit.inference.predictor import Classifier

    rows = list(csv.DictReader(test.open(encoding="utf-8")))
    texts, labels = [row["text"] for row in rows], [row["label"] for row in rows]
    classifiers = {name: Classifier.from_run(path) for name, path in run_dirs.items()}
    accuracy = {}
    for name, classifier in classifiers.items():  # also traces every length bucket
        chosen = classifier.predict_proba(texts).argmax(axis=1)
        hits = [classifier.labels[c] == label for c, label in zip(chosen, labels, strict=True)]
        accuracy[name] = sum(hits) / len(hits)
    seconds = {name: [] for name in classifiers}
    for _ in range(3):
        for name, classifier in classifiers.items():
            start = time.perf_counter()
            classifier.predict_proba(texts)
            seconds[name].append(time.perf_counter() - start)
    measured = {}
    for name, classifier in classifiers.items():
        export = export_classifier(classifier, work / f"export-{Path(run_dirs[name]).name}")
        size = sum(f.stat().st_size for f in export.rglob("*") if f.is_file())
        measured[name] = {
            "test_accuracy": accuracy[name],
            "predict_texts_per_second": len(texts) / statistics.median(seconds[name]),
            "parameters": int(classifier.module.model.count_params()),
            "saved_model_mib": size / 2**20,
        }
    return measured


def summary(per_seed: dict) -> dict:
    """Mean and spread (sample sd, min, max) of each model's measures over the seeds."""
    out = {}
    names = dict.fromkeys(name for seed in per_seed.values() for name in seed)
    for name in names:
        rows = [seed[name] for seed in per_seed.values() if name in seed]
        out[name] = {}
        for key in rows[0]:
            values = [row[key] for row in rows]
            out[name][key] = {
                "mean": statistics.fmean(values),
                "sd": statistics.stdev(values) if len(values) > 1 else None,
                "min": min(values),
                "max": max(values),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000, help="labelled training rows")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seeds", default="42", help="comma-separated")
    parser.add_argument("--work", help="where the runs go (default: a temporary folder)")
    parser.add_argument(
        "--add", action="store_true", help="keep the seeds already in bench/results/distill.json"
    )
    parser.add_argument(
        "--main-only", action="store_true", help="teacher, direct and distilled only"
    )
    parser.add_argument(
        "--students",
        help=f"comma-separated, instead of the default ones: {', '.join(SMALL_STUDENTS)}, "
        f"{', '.join(STUDENTS)}",
    )
    parser.add_argument("--result", default="distill", help="bench/results/NAME.json")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    folder = rotten_tomatoes_dir()
    rows = list(csv.reader((folder / "train.csv").open(encoding="utf-8")))[1:]
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-distill-"))
    work.mkdir(parents=True, exist_ok=True)
    train = write_rows(work / "train.csv", rows[: args.rows])
    unlabelled = write_rows(work / "unlabelled.csv", rows[args.rows : 2 * args.rows], False)
    cut = pretrained_cut(work)
    setting = {
        "labelled_rows": args.rows,
        "unlabelled_rows": len(rows[args.rows : 2 * args.rows]),
        "test_rows": sum(1 for _ in (folder / "test.csv").open()) - 1,
        "epochs": args.epochs,
        "max_seq_length": SEQ,
        "batch_size": BATCH,
        "learning_rate": LR,
        "student_layers": LAYERS,
        "temperature": 2.0,
        "soft_weight": 0.5,
        "seeds": seeds,
        "note": "2 CPU cores shared with other jobs: throughput is noisy, compare within a seed",
    }
    # what --augment 2 gives (bertfit.distill.augment), drawn with seed 0 for every run
    labelled = [Example(row[0], None, row[1], i) for i, row in enumerate(rows[: args.rows])]
    copies = [[copy.text] for copy in augmented(labelled, copies=2, seed=0)]
    more = write_rows(work / "augmented.csv", copies, False)
    data = {"train": str(train), "unlabelled": str(unlabelled), "cut": str(cut)}
    data["augmented"] = str(more)
    per_seed, training, earlier = {}, {}, []
    if args.add:
        kept = json.loads((RESULTS / f"{args.result}.json").read_text())
        per_seed, training = kept["per_seed"], kept["training_seconds"]
        earlier = [*kept.get("earlier_commands", []), kept["command"]]
        setting["seeds"] = list(dict.fromkeys([*kept["setting"]["seeds"], *seeds]))
    stages = [("teacher", "direct", "distilled"), STUDENTS[2:]][: 1 if args.main_only else 2]
    if args.students:
        stages = [("teacher", *args.students.split(","))]
        setting["students"] = {name: SMALL_STUDENTS.get(name) for name in stages[0][1:]}
    for seed in map(str, seeds):
        per_seed.setdefault(seed, {})
        training.setdefault(seed, {})
        # The main comparison first, then the two variants (the teacher measured again beside
        # them, for their throughput; its first measures are the ones reported).
        for stage in stages:
            runs = train_runs(stage, args, work, seed, data)
            training[seed].update(
                {name: run["seconds"] and round(run["seconds"], 1) for name, run in runs.items()}
            )
            run_dirs = {name: run["run_dir"] for name, run in runs.items()}
            run_dirs.setdefault("teacher", str(work / f"teacher-{seed}"))
            measured = measure(run_dirs, folder / "test.csv", work)
            for name, values in measured.items():
                per_seed[seed].setdefault(name, values)
            write_result(
                args.result,
                {
                    "setting": setting,
                    "seeds_done": list(per_seed),
                    "summary": summary(per_seed),
                    "per_seed": per_seed,
                    "training_seconds": training,
                    "earlier_commands": earlier,
                },
            )


if __name__ == "__main__":
    main()
