"""The peer of `bertfit predict`: a transformers script a user would write to label a CSV file
with MiniLM-L6 — fast tokenizer, `BertForSequenceClassification`, batches of 64 padded to their
longest row, `torch.inference_mode()` — writing one row per input (label, probabilities).

    python -m bench.peer_predict --data test.csv --output predictions.csv --out result.json

Run as its own process by bench.finetune (the whole process is timed there); writes the seconds
from the raw texts to the probabilities (tokenizing included) and the encoder's matrix products
in GFLOP (for the check against the machine's speed) to --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import time

import torch
from transformers import AutoTokenizer, BertForSequenceClassification

from bench.common import bert_forward_gflop
from bench.settings import SEQ
from bertfit.checkpoints.registry import resolve

BATCH = 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    path = str(resolve("minilm-l6"))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = BertForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    with open(args.data, newline="", encoding="utf-8") as f:
        texts = [row["text"] for row in csv.DictReader(f)]
    start = time.perf_counter()
    probabilities, gflop = [], 0.0
    with torch.inference_mode():
        for i in range(0, len(texts), BATCH):
            batch = tokenizer(
                texts[i : i + BATCH],
                max_length=SEQ,
                truncation=True,
                padding=True,
                return_tensors="pt",
            )
            probabilities.append(torch.softmax(model(**batch).logits, dim=-1))
            gflop += bert_forward_gflop(model.config.to_dict(), *batch["input_ids"].shape)
    probabilities = torch.cat(probabilities).numpy()
    seconds = time.perf_counter() - start
    with open(args.output, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "prob_neg", "prob_pos"])
        for p in probabilities:
            writer.writerow([int(p.argmax()), float(p[0]), float(p[1])])
    with open(args.out, "w") as f:
        json.dump(
            {
                "seconds": seconds,
                "examples": len(texts),
                "forward_gflop": gflop,
                "torch_threads": torch.get_num_threads(),
            },
            f,
        )


if __name__ == "__main__":
    main()
