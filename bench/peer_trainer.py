"""The peer of `bench.finetune`: transformers' `Trainer` fine-tuning MiniLM-L6 on Rotten Tomatoes,
as a user of transformers would write it (fast tokenizer, dynamic padding, `group_by_length`),
then predicting the test split. Run as its own process by bench.finetune, which times it:

    python -m bench.peer_trainer --epochs 1 --out result.json

Writes the wall-clock time (Unix seconds) at which the first optimizer step ended, the training
loop's seconds, and the test accuracy.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from transformers import (
    AutoTokenizer,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from bench.settings import BATCH, DECAY, LR, SEED, SEQ, WARMUP
from bertfit.checkpoints.registry import resolve
from bertfit.data.rotten_tomatoes import load_rotten_tomatoes


class FirstStep(TrainerCallback):
    ended: float | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.ended is None:
            FirstStep.ended = time.time()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-train-examples", type=int, default=None)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    path = str(resolve("minilm-l6"))
    train_rows = load_rotten_tomatoes("train")[: args.max_train_examples]
    test_rows = load_rotten_tomatoes("test")
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
        output_dir=args.workdir,
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=64,
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
        callbacks=[FirstStep()],
    )
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    predictions = trainer.predict(encode(test_rows))
    # The Trainer may reorder prediction batches (transformers 5 groups eval batches by length
    # too): compare with the label ids it returns beside the predictions, not the input order.
    predicted = np.argmax(predictions.predictions, axis=1)
    result = {
        "first_step_ended": FirstStep.ended,
        "train_seconds": train_seconds,
        "test_accuracy": float(np.mean(predicted == predictions.label_ids)),
        "test_examples": len(test_rows),
        "train_examples": len(train_set),
        "torch_threads": torch.get_num_threads(),
    }
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
