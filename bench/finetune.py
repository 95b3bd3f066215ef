"""Issue 3 benchmark: bertfit vs transformers' Trainer fine-tuning MiniLM-L6 on Rotten Tomatoes.

    python -m bench.finetune                       # the full setting (long on a 2-core CPU)
    python -m bench.finetune --epochs 1 --max-train-examples 2000   # a quick look

Same settings for both: the train split, max_seq_length 64, global batch 32, learning rate 5e-5,
linear schedule with 10% warmup, weight decay 0.01, clipping 1.0, seed 42, the [CLS] pooler
head. transformers uses dynamic padding and `group_by_length`; bertfit its length buckets.
Each side is timed from the raw text to a trained model (tokenization included), then
evaluated on the test split. Run in one process, one after the other, on the same machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import write_result
from bertfit.checkpoints.registry import resolve
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.rotten_tomatoes import load_rotten_tomatoes, rotten_tomatoes_dir

SEQ, BATCH, LR, WARMUP, SEED, DECAY = 64, 32, 5e-5, 0.1, 42, 0.01


def run_bertfit(args, workdir: Path) -> dict:
    from bertfit.training.run import evaluate, train

    data = rotten_tomatoes_dir()
    config = RunConfig(
        output_dir=str(workdir / "bertfit"),
        model=ModelConfig(name="minilm-l6", max_seq_length=SEQ, pooling="cls"),
        data=DataConfig(train=str(data / "train.csv"), max_train_examples=args.max_train_examples),
        train=TrainConfig(
            batch_size=BATCH,
            epochs=args.epochs,
            learning_rate=LR,
            warmup_ratio=WARMUP,
            weight_decay=DECAY,
            seed=SEED,
            jit_compile=args.bertfit_jit,
        ),
    )
    start = time.perf_counter()
    result = train(config, quiet=True)
    seconds = time.perf_counter() - start
    test = evaluate(config.output_dir, str(data / "test.csv"), quiet=True)
    return {
        "train_seconds": seconds,
        "test_accuracy": test["accuracy"],
        "test_macro_f1": test["macro_f1"],
        "test_examples": test["num_examples"],
        "train_examples": result["train_num_examples"],
        "jit_compile": args.bertfit_jit,
    }


def run_transformers(args, workdir: Path) -> dict:
    import torch
    from transformers import (
        AutoTokenizer,
        BertForSequenceClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    path = str(resolve("minilm-l6"))
    train_rows = load_rotten_tomatoes("train")[: args.max_train_examples]
    test_rows = load_rotten_tomatoes("test")
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(path)

    def encode(rows):
        encoded = tokenizer([t for t, _ in rows], max_length=SEQ, truncation=True)
        return [
            {"input_ids": i, "attention_mask": m, "token_type_ids": t, "labels": label}
            for i, m, t, (_, label) in zip(
                encoded["input_ids"],
                encoded["attention_mask"],
                encoded["token_type_ids"],
                rows,
                strict=True,
            )
        ]

    train_set = encode(train_rows)
    torch.manual_seed(SEED)
    model = BertForSequenceClassification.from_pretrained(path, num_labels=2)
    training_args = TrainingArguments(
        output_dir=str(workdir / "transformers"),
        per_device_train_batch_size=BATCH,
        num_train_epochs=args.epochs,
        learning_rate=LR,
        warmup_steps=WARMUP,  # a ratio in v5
        weight_decay=DECAY,
        max_grad_norm=1.0,
        lr_scheduler_type="linear",
        seed=SEED,
        train_sampling_strategy="group_by_length",
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        data_collator=DataCollatorWithPadding(tokenizer),
    )
    trainer.train()
    seconds = time.perf_counter() - start
    predictions = trainer.predict(encode(test_rows))
    # The Trainer may reorder prediction batches (transformers 5 groups eval batches by length
    # too): compare with the label ids it returns beside the predictions, not the input order.
    predicted = np.argmax(predictions.predictions, axis=1)
    labels = predictions.label_ids
    return {
        "train_seconds": seconds,
        "test_accuracy": float(np.mean(predicted == labels)),
        "test_examples": len(test_rows),
        "train_examples": len(train_set),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-train-examples", type=int, default=None)
    parser.add_argument("--bertfit-jit", type=lambda s: s.lower() == "true", default=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        theirs = run_transformers(args, Path(tmp))
        ours = run_bertfit(args, Path(tmp))
    write_result(
        "finetune",
        {
            "settings": {
                "max_seq_length": SEQ,
                "batch": BATCH,
                "learning_rate": LR,
                "epochs": args.epochs,
                "warmup_ratio": WARMUP,
                "seed": SEED,
                "max_train_examples": args.max_train_examples,
            },
            "bertfit": ours,
            "transformers_trainer": theirs,
            "wall_time_ratio_bertfit_over_trainer": ours["train_seconds"] / theirs["train_seconds"],
            "accuracy_difference_bertfit_minus_trainer": ours["test_accuracy"]
            - theirs["test_accuracy"],
        },
    )


if __name__ == "__main__":
    main()
