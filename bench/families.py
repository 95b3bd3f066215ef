"""Issue 30 benchmark: every encoder family, one training step and one inference batch at the
same shapes, bertfit vs transformers on torch (2 threads), as ratios.

    python -m bench.families [--batch 32] [--seq 64] [--repeats 5] [--families mpnet,gte]

Each family is a MiniLM-L6-sized model (6 layers, hidden 384, 12 heads, feed-forward 1536,
vocabulary 30,522; ELECTRA's and ALBERT's embeddings 128 wide) with transformers' own random
initialisation, written by `save_pretrained` and read by both sides from the same directory.
bertfit: `BertClassifier` (pooling `cls`) inference in a `tf.function`, and the training step as
`Trainer` compiles it (the CLI's XLA choice for this machine). transformers: the family's
`AutoModelForSequenceClassification` in `torch.inference_mode`, and forward + cross-entropy +
backward + AdamW step, in a child process of its own (TensorFlow and torch in one process fight
over threads). Times are medians of `repeats` calls after two warm-up calls.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from bench.common import write_result
from bertfit.model.inputs import GLOBAL_EXAMPLES, INDEX, LABEL, WEIGHT
from bertfit.tf_startup import start_tensorflow

SIZE = dict(
    vocab_size=30522,
    hidden_size=384,
    num_hidden_layers=6,
    num_attention_heads=12,
    intermediate_size=1536,
    max_position_embeddings=514,
)


def configs(transformers) -> dict:
    """family → a MiniLM-L6-sized config of that family."""
    return {
        "bert": transformers.BertConfig(**SIZE),
        "electra": transformers.ElectraConfig(**SIZE, embedding_size=128),
        "distilbert": transformers.DistilBertConfig(
            vocab_size=30522, dim=384, n_layers=6, n_heads=12, hidden_dim=1536
        ),
        "albert": transformers.AlbertConfig(**SIZE, embedding_size=128),
        "roberta": transformers.RobertaConfig(**SIZE, type_vocab_size=1, pad_token_id=1),
        "xlm-roberta": transformers.XLMRobertaConfig(**SIZE, type_vocab_size=1, pad_token_id=1),
        "deberta-v2": transformers.DebertaV2Config(
            **{**SIZE, "max_position_embeddings": 512},
            relative_attention=True,
            position_buckets=256,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            type_vocab_size=0,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
        ),
        "modernbert": transformers.ModernBertConfig(
            vocab_size=30522,
            hidden_size=384,
            num_hidden_layers=6,
            num_attention_heads=12,
            intermediate_size=1536,
            max_position_embeddings=8192,
            pad_token_id=0,
            bos_token_id=101,
            eos_token_id=102,
            cls_token_id=101,
            sep_token_id=102,
        ),
        "mpnet": transformers.MPNetConfig(**SIZE, pad_token_id=1),
        "gte": transformers.GteConfig(**SIZE, pad_token_id=1),
        "nomic_bert": transformers.NomicBertConfig(**SIZE),
        "eurobert": transformers.EuroBertConfig(
            vocab_size=30522,
            hidden_size=384,
            num_hidden_layers=6,
            num_attention_heads=12,
            num_key_value_heads=4,  # grouped, as EuroBERT-610m's 18 heads share 6
            intermediate_size=1536,
            max_position_embeddings=8192,
            pad_token_id=0,
            bos_token_id=101,
            eos_token_id=102,
            mask_token_id=103,
        ),
    }


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats + 2):
        start = time.perf_counter()
        out = fn()
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times[2:]))


def _batch(batch: int, seq: int) -> dict:
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (batch, seq)).astype("int32")
    return {
        "input_word_ids": ids,
        "input_mask": np.ones((batch, seq), "int32"),
        "input_type_ids": np.zeros((batch, seq), "int32"),
        "labels": rng.integers(0, 2, batch).astype("int32"),
    }


def bertfit_ms(path: Path, data: dict, repeats: int) -> dict:
    from bertfit.checkpoints.hf import read_hf
    from bertfit.checkpoints.load import build_encoder
    from bertfit.config import TrainConfig
    from bertfit.model.classifier import BertClassifier
    from bertfit.training.loop import Trainer

    checkpoint = read_hf(path)
    features = {k: tf.constant(data[k]) for k in ("input_word_ids", "input_mask", "input_type_ids")}
    model = BertClassifier(build_encoder(checkpoint), 2, "cls", 0.1, seed=0)
    infer = tf.function(lambda: model(features))
    trainer = Trainer(
        lambda: BertClassifier(build_encoder(checkpoint), 2, "cls", 0.1, seed=0),
        tf.distribute.get_strategy(),
        TrainConfig(),
        10_000,
    )
    batch = {
        **features,
        LABEL: tf.constant(data["labels"]),
        WEIGHT: tf.ones(len(data["labels"])),
        GLOBAL_EXAMPLES: tf.constant(float(len(data["labels"]))),
        INDEX: tf.range(len(data["labels"])),
    }
    step = tf.function(lambda: trainer._apply(batch))
    return {
        "inference_ms": _median_ms(infer, repeats),
        "train_step_ms": _median_ms(step, repeats),
        "xla": trainer.xla.describe(),
    }


TORCH_CHILD = """
import json, sys, time
import numpy as np, torch
from transformers import AutoModelForSequenceClassification
torch.set_num_threads(2)
path, data_file, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = np.load(data_file)
model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
inputs = {"input_ids": torch.tensor(data["input_word_ids"], dtype=torch.long),
          "attention_mask": torch.tensor(data["input_mask"], dtype=torch.long)}
if model.config.model_type in ("bert", "electra", "albert"):
    inputs["token_type_ids"] = torch.tensor(data["input_type_ids"], dtype=torch.long)
labels = torch.tensor(data["labels"], dtype=torch.long)
def median_ms(fn):
    times = []
    for _ in range(repeats + 2):
        start = time.perf_counter(); fn(); times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times[2:]))
model.eval()
def infer():
    with torch.inference_mode():
        model(**inputs)
inference = median_ms(infer)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
def step():
    optimizer.zero_grad()
    loss = model(**inputs, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
train = median_ms(step)
print(json.dumps({"inference_ms": inference, "train_step_ms": train,
                  "threads": torch.get_num_threads()}))
"""


def torch_ms(path: Path, data: dict, repeats: int) -> dict:
    data_file = path / "inputs.npz"
    np.savez(data_file, **data)
    done = subprocess.run(
        [sys.executable, "-c", TORCH_CHILD, str(path), str(data_file), str(repeats)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--families", default="")
    args = parser.parse_args()
    start_tensorflow()
    import torch
    import transformers

    data = _batch(args.batch, args.seq)
    wanted = [f for f in args.families.split(",") if f]
    results, rows = {}, []
    for family, config in configs(transformers).items():
        if wanted and family not in wanted:
            continue
        with tempfile.TemporaryDirectory() as folder:
            torch.manual_seed(0)
            transformers.AutoModel.from_config(config).save_pretrained(folder)
            ours = bertfit_ms(Path(folder), data, args.repeats)
            theirs = torch_ms(Path(folder), data, args.repeats)
        results[family] = {
            "bertfit": ours,
            "transformers_torch": theirs,
            "inference_speedup": theirs["inference_ms"] / ours["inference_ms"],
            "train_step_speedup": theirs["train_step_ms"] / ours["train_step_ms"],
        }
        rows.append(
            f"| {family}, batch {args.batch} x seq {args.seq}: inference / train step | "
            f"{ours['inference_ms']:.0f} / {ours['train_step_ms']:.0f} ms | "
            f"{theirs['inference_ms']:.0f} / {theirs['train_step_ms']:.0f} ms (torch, "
            f"{theirs['threads']} threads) | {results[family]['inference_speedup']:.2f}x / "
            f"{results[family]['train_step_speedup']:.2f}x speed |"
        )
        print(rows[-1], flush=True)
    # a subset's rows in their own file, beside the whole table's (families.json)
    name = "-".join(["families", *wanted])
    write_result(name, {"settings": vars(args), "families": results, "table_rows": rows})


if __name__ == "__main__":
    main()
