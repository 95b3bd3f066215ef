"""`bertfit doctor` on the models users train, for the day a GPU or TPU is at hand (issue 43).

Two encoders at seq 128 (one bucket, `--buckets 128`), on Rotten Tomatoes training texts joined
eight at a time (about 220 tokens, so that every row fills 128 on every device, with or without
XLA; the label is the first snippet's): MiniLM-L6 (the default, 22.7M parameters) and a random
encoder of BERT-base's shape (12 layers, hidden 768, 110M parameters, MiniLM's WordPiece
vocabulary). Each runs in its own `bertfit
doctor` process with the CLI's defaults (the strategy and XLA as `train` picks them on this
machine), so on a GPU or TPU VM the same command measures the accelerator:

    python -m bench.accelerator [--steps N] [--batch-size B] [--backends tensorflow,jax]

Each model runs on each Keras backend (`bertfit doctor --backend`): TensorFlow where a TensorFlow
build drives the device, JAX on the TPUs that run only JAX (v5e, v6e, TPU7x) and on GPUs.

It writes bench/results/accelerator.json (each model's report, the device it ran on, the load
average) and the rows of BENCHMARKS.md's table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parents[1]
BERT_BASE = dict(
    hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
)


def write_bert_base(path: Path, vocab_dir: str) -> Path:
    """A random BERT-base-sized encoder with MiniLM's vocabulary, as a Hugging Face folder."""
    code = f"""
import shutil, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from bertfit.tf_startup import start_tensorflow
start_tensorflow()
from bertfit.model.config import BertConfig
from tests.tiny import write_tiny_hf
vocab = Path({vocab_dir!r}) / "vocab.txt"
size = sum(1 for _ in vocab.open(encoding="utf-8"))
config = BertConfig(vocab_size=size, max_position_embeddings=512, **{BERT_BASE!r})
write_tiny_hf(Path({str(path)!r}), config, trainable=True)
shutil.copy(vocab, Path({str(path)!r}) / "vocab.txt")
"""
    path.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return path


def joined_texts(source: Path, target: Path, per_row: int = 8) -> str:
    """Rotten Tomatoes rows joined `per_row` at a time, each at least 128 tokens long."""
    with source.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with target.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for start in range(0, len(rows) - per_row + 1, per_row):
            group = rows[start : start + per_row]
            writer.writerow([" ".join(r["text"] for r in group), group[0]["label"]])
    return str(target)


def doctor(model: str, train: str, steps: int, batch_size: int, backend: str) -> dict:
    command = [sys.executable, "-m", "bertfit.cli", "doctor", "--model", model]
    command += ["--backend", backend]
    command += ["--train", train, "--max-seq-length", "128", "--buckets", "128"]
    command += ["--batch-size", str(batch_size), "--steps", str(steps), "--json"]
    done = subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows(result: dict) -> list[str]:
    out = []
    for name, report in result["models"].items():
        where = report["devices"][-1].split("device:")[-1]
        mfu = f"{report['mfu']:.1%}" if report["mfu"] is not None else "?"
        memory = report["peak_memory_bytes"]
        memory = f"{memory / 2**20:,.0f} MiB" if memory else "?"
        out.append(
            f"| doctor: {name}, seq 128 batch {result['settings']['batch_size']}, {where} "
            f"| {report['examples_per_second']:.1f} ex/s, step {report['step_seconds']:.2f} s, "
            f"MFU {mfu}, peak {memory}, {report['compilations_after_warmup']} compilations "
            f"after warm-up | - | - |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--backends", default="tensorflow,jax")
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    sys.path.insert(0, str(ROOT))
    from bertfit.checkpoints.registry import resolve
    from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

    minilm = str(resolve("minilm-l6"))
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        train = joined_texts(Path(rotten_tomatoes_dir()) / "train.csv", Path(tmp) / "train.csv")
        base = write_bert_base(Path(tmp) / "bert-base", minilm)
        models = {
            f"{name}, {backend}": doctor(path, train, args.steps, args.batch_size, backend)
            for name, path in (("MiniLM-L6", minilm), ("BERT-base (random)", str(base)))
            for backend in backends
        }
    result = {
        "settings": {"steps": args.steps, "batch_size": args.batch_size, "seq_length": 128},
        "load_average": [load, os.getloadavg()[0]],
        "models": models,
    }
    result["table_rows"] = rows(result)
    write_result("accelerator", result)


if __name__ == "__main__":
    main()
