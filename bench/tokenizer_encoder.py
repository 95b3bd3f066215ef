"""Issue 2 benchmark: tokenizer throughput and encoder forward speed, as ratios vs transformers.

    python -m bench.tokenizer_encoder

Tokenizer: every Rotten Tomatoes train text to max_length 128 (truncation, padding), bertfit's
in-graph tokenizer vs the transformers fast tokenizer. Encoder: MiniLM-L6 forward at seq 64,
batch 64, bertfit (tf.function, with and without XLA) vs `BertModel` in `torch.inference_mode`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import torch
from transformers import AutoTokenizer, BertModel

from bench.common import best_of, write_result
from bertfit import load_encoder
from bertfit.checkpoints.registry import resolve
from bertfit.data.rotten_tomatoes import load_rotten_tomatoes

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
    model = BertModel.from_pretrained(path).eval()
    torch_inputs = {
        "input_ids": torch.tensor(inputs["input_word_ids"].numpy(), dtype=torch.long),
        "attention_mask": torch.tensor(inputs["input_mask"].numpy(), dtype=torch.long),
        "token_type_ids": torch.tensor(inputs["input_type_ids"].numpy(), dtype=torch.long),
    }

    def run_torch():
        with torch.inference_mode():
            model(**torch_inputs)

    graph_s = best_of(lambda: eager_graph(inputs).numpy(), repeats=5)
    xla_s = best_of(lambda: xla(inputs).numpy(), repeats=5)
    torch_s = best_of(run_torch, repeats=5)
    return {
        "seq_length": SEQ,
        "batch": BATCH,
        "bertfit_tf_function_examples_per_s": BATCH / graph_s,
        "bertfit_xla_examples_per_s": BATCH / xla_s,
        "transformers_torch_examples_per_s": BATCH / torch_s,
        "ratio_bertfit_best_over_transformers": torch_s / min(graph_s, xla_s),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    texts = [text for text, _ in load_rotten_tomatoes("train")]
    path = str(resolve("minilm-l6"))
    np.random.default_rng(0)
    write_result(
        "tokenizer_encoder",
        {"tokenizer": tokenizer_bench(texts, path), "encoder_forward": encoder_bench(texts, path)},
    )


if __name__ == "__main__":
    main()
