"""The peer of `bench.quality`: transformers' `Trainer` fine-tuning MiniLM-L6 on a `text,label`
CSV task as a transformers user writes it, with bench.settings' hyper-parameters.

    python -m bench.peer_quality --task multi-label --train t.csv --eval d.csv --test x.csv \
        --epochs 3 --seed 1 --workdir W --out result.json

multi-label: `problem_type="multi_label_classification"` (binary cross-entropy on sigmoid
outputs), labels split on `|`, threshold 0.5. single-label: softmax cross-entropy. Like bertfit,
it evaluates on `--eval` after every epoch and keeps the best epoch (micro-F1, or accuracy for
single-label), then scores `--test`; for multi-label also at the threshold bertfit's
`--tune-threshold` rule picks on `--eval` (`test_tuned_threshold`, for comparison).
"""

from __future__ import annotations

import argparse
import csv
import json

import numpy as np
import torch
from transformers import (
    AutoTokenizer,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

from bench.settings import BATCH, DECAY, LR, SEQ, WARMUP
from bertfit.checkpoints.registry import resolve
from bertfit.runs.metrics import best_threshold


def read(path: str) -> list[tuple[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [(row["text"], row["label"]) for row in csv.DictReader(f)]


def scores(task: str, logits: np.ndarray, targets: np.ndarray) -> dict:
    """micro/macro-F1 (multi-label, threshold 0.5) or accuracy/macro-F1 (single-label)."""
    from sklearn.metrics import accuracy_score, f1_score

    if task == "multi-label":
        predicted = (1 / (1 + np.exp(-logits)) >= 0.5).astype(int)
        return {
            "micro_f1": f1_score(targets, predicted, average="micro", zero_division=0),
            "macro_f1": f1_score(targets, predicted, average="macro", zero_division=0),
        }
    predicted = logits.argmax(axis=1)
    return {
        "accuracy": accuracy_score(targets, predicted),
        "macro_f1": f1_score(targets, predicted, average="macro", zero_division=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", choices=["multi-label", "single-label"], required=True)
    for name in ("--train", "--eval", "--test", "--workdir", "--out"):
        parser.add_argument(name, required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    multi = args.task == "multi-label"
    train, dev, test = read(args.train), read(args.eval), read(args.test)
    if multi:
        labels = sorted({t for _, label in train for t in label.split("|") if t})
    else:
        labels = sorted({label for _, label in train})
    path = str(resolve("minilm-l6"))
    tokenizer = AutoTokenizer.from_pretrained(path)

    def target(label: str):
        if not multi:
            return labels.index(label)
        items = set(filter(None, label.split("|")))
        return [float(name in items) for name in labels]

    def encode(rows):
        encoded = tokenizer([t for t, _ in rows], max_length=SEQ, truncation=True)
        return [
            {"input_ids": i, "attention_mask": m, "token_type_ids": t, "labels": target(label)}
            for i, m, t, (_, label) in zip(
                encoded["input_ids"],
                encoded["attention_mask"],
                encoded["token_type_ids"],
                rows,
                strict=True,
            )
        ]

    best = "micro_f1" if multi else "accuracy"
    # One thread: the scores do not depend on it, and on a crowded 2-core CPU torch's two
    # threads waited on each other (one epoch took over 30 minutes).
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = BertForSequenceClassification.from_pretrained(
        path,
        num_labels=len(labels),
        problem_type="multi_label_classification" if multi else "single_label_classification",
    )
    training_args = TrainingArguments(
        output_dir=args.workdir,
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=64,
        num_train_epochs=args.epochs,
        learning_rate=LR,
        warmup_steps=WARMUP,  # a ratio in v5
        weight_decay=DECAY,
        max_grad_norm=1.0,
        lr_scheduler_type="linear",
        seed=args.seed,
        train_sampling_strategy="group_by_length",
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model=best,
        report_to=[],
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=encode(train),
        eval_dataset=encode(dev),
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=lambda p: scores(args.task, p.predictions, p.label_ids),
    )
    trainer.train()
    dev_epochs = [
        {k.removeprefix("eval_"): v for k, v in entry.items() if k.startswith("eval_")}
        for entry in trainer.state.log_history
        if "eval_loss" in entry
    ]
    # The Trainer may reorder prediction batches: score against the label ids it returns.
    predictions = trainer.predict(encode(test))
    tuned = {}
    if multi:  # for comparison only: bertfit's default threshold rule, on the Trainer's outputs
        on_dev = trainer.predict(encode(dev))
        threshold = best_threshold(on_dev.label_ids, 1 / (1 + np.exp(-on_dev.predictions)))
        shifted = predictions.predictions - np.log(threshold / (1 - threshold))
        tuned = {"test_tuned_threshold": scores(args.task, shifted, predictions.label_ids)}
        tuned["test_tuned_threshold"]["threshold"] = threshold
    result = {
        "labels": labels,
        "test": scores(args.task, predictions.predictions, predictions.label_ids),
        **tuned,
        "dev_epochs": dev_epochs,
        "train_examples": len(train),
        "test_examples": len(test),
    }
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
