"""Issue 2 benchmark: tokenizer throughput and encoder forward speed, as ratios vs transformers.

    python -m bench.tokenizer_encoder

Tokenizer: every Rotten Tomatoes train text to max_length 128 (truncation, padding), bertfit's
in-graph tokenizer vs the transformers fast tokenizer. Encoder: MiniLM-L6 forward at seq 64,
batch 64, bertfit (tf.function, with and without XLA) vs `BertModel` in `torch.inference_mode`.
The torch side runs in a child process of its own: TensorFlow and torch in one process fight
over threads and slow torch down several times (an earlier version of this file measured
15 ex/s for torch that way). Both sides' speed is also given as a fraction of the machine's
float32 matmul speed (bench.common.matmul_gflops): at seq 64 one batch is ~89 GFLOP, so a
machine doing 60 GFLOP/s allows at most ~43 ex/s, and a machine three times as fast ~130.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf
from transformers import AutoTokenizer

from bench.common import bert_forward_gflop, best_of, fraction_of_peak, matmul_gflops, write_result
from bertfit import load_encoder
from bertfit.checkpoints.registry import resolve
from bertfit.data.rotten_tomatoes import load_rotten_tomatoes
from bertfit.tf_startup import start_tensorflow

SEQ, BATCH = 64, 64


def tokenizer_bench(texts: list[str], path: str) -> dict:
    _, ours = load_encoder("minilm-l6")
    theirs = AutoTokenizer.from_pretrained(path)
    ours_s = best_of(lambda: ours(texts, max_seq_length=128))
    theirs_s = best_of(
        lambda: theirs(
            texts, max_length=128, truncation=True, padding="max_length", return_tensors="np"
        )
    )
    n = len(texts)
    return {
        "texts": n,
        "bertfit_texts_per_s": n / ours_s,
        "transformers_texts_per_s": n / theirs_s,
        "ratio_bertfit_over_transformers": theirs_s / ours_s,
    }


def encoder_bench(texts: list[str], path: str) -> dict:
    encoder, tokenizer = load_encoder("minilm-l6")
    inputs = tokenizer(texts[:BATCH], max_seq_length=SEQ)
    eager_graph = tf.function(lambda x: encoder(x)["sequence_output"])
    xla = tf.function(lambda x: encoder(x)["sequence_output"], jit_compile=True)
    graph_s = best_of(lambda: eager_graph(inputs).numpy(), repeats=5)
    xla_s = best_of(lambda: xla(inputs).numpy(), repeats=5)
    torch_s, torch_threads = torch_forward_seconds({k: v.numpy() for k, v in inputs.items()}, path)
    gflop = bert_forward_gflop(json.loads((Path(path) / "config.json").read_text()), BATCH, SEQ)
    peak = matmul_gflops()
    return {
        "seq_length": SEQ,
        "batch": BATCH,
        "bertfit_tf_function_examples_per_s": BATCH / graph_s,
        "bertfit_xla_examples_per_s": BATCH / xla_s,
        "transformers_torch_examples_per_s": BATCH / torch_s,
        "ratio_bertfit_best_over_transformers": torch_s / min(graph_s, xla_s),
        "bertfit_best_fraction_of_matmul_peak": fraction_of_peak(gflop, min(graph_s, xla_s), peak),
        "transformers_fraction_of_matmul_peak": fraction_of_peak(gflop, torch_s, peak),
        "torch_threads": torch_threads,
    }


TORCH_CHILD = """
import json, sys, time
import numpy as np, torch
from transformers import BertModel
data = np.load(sys.argv[2])
model = BertModel.from_pretrained(sys.argv[1]).eval()
inputs = {"input_ids": torch.tensor(data["input_word_ids"], dtype=torch.long),
          "attention_mask": torch.tensor(data["input_mask"], dtype=torch.long),
          "token_type_ids": torch.tensor(data["input_type_ids"], dtype=torch.long)}
times = []
with torch.inference_mode():
    model(**inputs)
    for _ in range(5):
        start = time.perf_counter()
        model(**inputs)
        times.append(time.perf_counter() - start)
print(json.dumps({"seconds": min(times), "threads": torch.get_num_threads()}))
"""


def torch_forward_seconds(inputs: dict, path: str) -> tuple[float, int]:
    """The fastest of 5 forwards of transformers' BertModel on `inputs`, in a child process."""
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "inputs.npz"
        np.savez(data, **inputs)
        done = subprocess.run(
            [sys.executable, "-c", TORCH_CHILD, path, str(data)],
            capture_output=True,
            text=True,
            check=True,
        )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["seconds"], result["threads"]


def main() -> None:
    start_tensorflow()  # the CLI's Grappler setting; TensorFlow is loaded already
    texts = [text for text, _ in load_rotten_tomatoes("train")]
    path = str(resolve("minilm-l6"))
    np.random.default_rng(0)
    write_result(
        "tokenizer_encoder",
        {"tokenizer": tokenizer_bench(texts, path), "encoder_forward": encoder_bench(texts, path)},
    )


if __name__ == "__main__":
    main()
