"""Tiny random BERTs and vocabularies for fast tests (no MiniLM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.model.config import BertConfig
from bertfit.model.encoder import BertEncoder

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a an film movie good bad great awful boring fun plot actor story is was not "
         "very , . ! ? ' and but it this that of to in").split()
PIECES = ["##s", "##ing", "##ed", "##ly", "##y"]
TINY_VOCAB = SPECIAL + WORDS + PIECES

TINY_CONFIG = BertConfig(
    vocab_size=len(TINY_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def tiny_encoder(config: BertConfig = TINY_CONFIG, seed: int = 0) -> BertEncoder:
    """An encoder whose every weight is random, biases and LayerNorms included."""
    encoder = BertEncoder(config)
    rng = np.random.default_rng(seed)
    for variable in encoder.weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype("float32"))
    return encoder


def write_vocab(path: Path, vocab=TINY_VOCAB) -> Path:
    file = path / "vocab.txt"
    file.write_text("".join(f"{token}\n" for token in vocab), encoding="utf-8")
    return file


def write_tiny_hf(path: Path, config: BertConfig = TINY_CONFIG, prefix: str = "") -> BertEncoder:
    """Writes a random tiny BERT as a HF directory with the real safetensors writer."""
    from safetensors.numpy import save_file

    from bertfit.checkpoints.names import hf_table
    from bertfit.checkpoints.weights import read_weights

    encoder = tiny_encoder(config)
    tensors = read_weights(encoder, hf_table(config.num_hidden_layers))
    save_file({prefix + k: np.ascontiguousarray(v) for k, v in tensors.items()},
              str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config.to_hf_dict()))
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    write_vocab(path)
    return encoder


def tiny_inputs(batch: int = 3, seq: int = 8, seed: int = 1) -> dict[str, tf.Tensor]:
    """Random ids with right padding of varying length and two segments."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, len(TINY_VOCAB), (batch, seq))
    lengths = np.linspace(seq, 3, batch).astype(int)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype("int32")
    ids[:, 0] = 2
    types = ((np.arange(seq)[None, :] >= lengths[:, None] // 2) & (mask == 1)).astype("int32")
    return {"input_word_ids": tf.constant(ids * mask, tf.int32), "input_mask": tf.constant(mask),
            "input_type_ids": tf.constant(types)}
