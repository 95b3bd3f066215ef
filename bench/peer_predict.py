"""The peer of `bertfit predict`: a transformers script a user would write to label a CSV file
with MiniLM-L6 — fast tokenizer, `BertForSequenceClassification`, batches of 64 rows of similar
length padded to their longest row, `torch.inference_mode()` — writing one row per input
(label, probabilities) in input order.

Batches of similar length are what the Trainer's own evaluation does with `group_by_length`
(its `LengthGroupedSampler`) and what bertfit does: in file order each batch of the test set
pads to ~56 token slots per row for a mean length of 27, and the peer runs at about half the
speed it is known to reach here (~105 vs ~200 ex/s on 2 cores).

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
    encoded = tokenizer(texts, max_length=SEQ, truncation=True)
    rows = [{name: encoded[name][i] for name in encoded} for i in range(len(texts))]
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["input_ids"]))
    probabilities, gflop, slots = [], 0.0, 0
    with torch.inference_mode():
        for i in range(0, len(order), BATCH):
            chosen = [rows[j] for j in order[i : i + BATCH]]
            batch = tokenizer.pad(chosen, padding=True, return_tensors="pt")
            probabilities.append(torch.softmax(model(**batch).logits, dim=-1))
            gflop += bert_forward_gflop(model.config.to_dict(), *batch["input_ids"].shape)
            slots += batch["input_ids"].numel()
    sorted_rows = torch.cat(probabilities)
    probabilities = torch.empty_like(sorted_rows)
    probabilities[order] = sorted_rows  # back to input order
    probabilities = probabilities.numpy()
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
                "token_slots_per_example": slots / max(len(texts), 1),
                "torch_threads": torch.get_num_threads(),
            },
            f,
        )


if __name__ == "__main__":
    main()
