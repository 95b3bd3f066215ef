"""One SetFit 1.2 fit and its test scores, for bench/fewshot.py: prints one JSON line.

It runs in a process of its own (torch, not beside the bench's TensorFlow). SetFit's defaults
(`TrainingArguments()`: one epoch over its oversampled pairs, batch 16, body learning rate 2e-5,
a logistic-regression head), except what the bench sets on every side: the seed, the
truncation (`max_length`, the body's own is 256 tokens for MiniLM, 384 for MPNet), and, where
asked, `num_iterations` (2 x N pairs a row instead of every pair). Nothing is logged or
reported (`report_to="none"`, no progress bar); checkpoints go to a temporary folder.

    python -m bench.setfit_trial --body DIR --train train.csv --test test.csv --seed 1
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path


def read(path: Path) -> tuple[list[str], list[str]]:
    """The texts and labels of a `text,label` CSV."""
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--body", type=Path, required=True, help="a sentence-transformers folder")
    parser.add_argument("--train", type=Path, required=True)
    parser.add_argument("--test", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--max-length", type=int, required=True)
    parser.add_argument("--num-iterations", type=int, default=None)
    args = parser.parse_args()

    started = time.perf_counter()
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments
    from sklearn.metrics import accuracy_score, f1_score

    texts, labels = read(args.train)
    test_texts, test_labels = read(args.test)
    names = sorted(set(labels))
    model = SetFitModel.from_pretrained(str(args.body))
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(
            model=model,
            args=TrainingArguments(
                output_dir=out,
                seed=args.seed,
                max_length=args.max_length,
                num_iterations=args.num_iterations,
                report_to="none",
                show_progress_bar=False,
            ),
            train_dataset=Dataset.from_dict(
                {"text": texts, "label": [names.index(label) for label in labels]}
            ),
        )
        fit_started = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - fit_started
    predicted = [names[int(i)] for i in model.predict(test_texts)]
    print(
        json.dumps(
            {
                "accuracy": accuracy_score(test_labels, predicted),
                "macro_f1": f1_score(test_labels, predicted, average="macro"),
                "train_seconds": train_seconds,
                "command_seconds": time.perf_counter() - started,
            }
        )
    )


if __name__ == "__main__":
    main()
