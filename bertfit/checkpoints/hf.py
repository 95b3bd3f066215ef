"""Hugging Face BERT directories: `config.json` + safetensors (single or sharded) + `vocab.txt`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.names import HF_IGNORED_PREFIXES, hf_table
from bertfit.checkpoints.torch_bin import has_bin, read_torch_bin, shard_files
from bertfit.checkpoints.weights import read_weights
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.text.tokenizer import read_tokenizer_config

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PREFIX = "bert."


def has_safetensors(path: Path) -> bool:
    return (path / SAFETENSORS).is_file() or (path / SAFETENSORS_INDEX).is_file()


def is_hf_dir(path: Path) -> bool:
    """`config.json` with safetensors (single or sharded) or a PyTorch `.bin` state dict."""
    return (
        path.is_dir()
        and (path / "config.json").is_file()
        and (has_safetensors(path) or has_bin(path))
    )


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors of `model.safetensors`, or of every shard its index names."""
    tensors: dict[str, np.ndarray] = {}
    for file in shard_files(path, SAFETENSORS, SAFETENSORS_INDEX):
        try:
            tensors.update(load_file(str(file)))
        except (SafetensorError, OSError) as e:
            raise CheckpointError(
                f"{file}: cannot read safetensors ({e}). The file is truncated or not safetensors; "
                "download or export it again."
            ) from e
    return tensors


def strip_prefix(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`BertForSequenceClassification` keys carry "bert."; `BertModel` keys do not. Accept both."""
    return {k.removeprefix(PREFIX): v for k, v in tensors.items()}


def read_hf(path: Path) -> Checkpoint:
    """Reads a HF BERT directory: safetensors ("hf") or, without them, a `.bin` ("hf-bin")."""
    config = BertConfig.from_json_file(path / "config.json")
    safetensors = has_safetensors(path)
    tensors = strip_prefix(read_safetensors(path) if safetensors else read_torch_bin(path))
    vocab = path / "vocab.txt"
    tokenizer = read_tokenizer_config(path)
    return Checkpoint(
        format="hf" if safetensors else "hf-bin",
        path=path,
        config=config,
        tensors=tensors,
        table=hf_table(config.num_hidden_layers),
        vocab_file=vocab if vocab.is_file() else None,
        ignored_prefixes=HF_IGNORED_PREFIXES,
        lower_case=tokenizer.get("lower_case"),
        strip_accents=tokenizer.get("strip_accents"),
    )


def write_hf(
    encoder, tokenizer, path: Path, vocab_file: Path | None = None, lower_case: bool | None = None
) -> None:
    """Writes `encoder` as a HF `BertModel` directory, with `vocab_file` and the casing as
    `vocab.txt` and `tokenizer_config.json` when given."""
    path.mkdir(parents=True, exist_ok=True)
    tensors = read_weights(encoder, hf_table(encoder.config.num_hidden_layers))
    save_file(
        {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()},
        str(path / SAFETENSORS),
        metadata={"format": "pt"},
    )
    (path / "config.json").write_text(json.dumps(encoder.config.to_hf_dict(), indent=2))
    if vocab_file is not None:
        shutil.copyfile(vocab_file, path / "vocab.txt")
    elif tokenizer is not None and hasattr(tokenizer, "save_vocabulary"):
        tokenizer.save_vocabulary(path)
    if lower_case is not None:
        (path / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "BertTokenizer",
                    "do_lower_case": lower_case,
                    "model_max_length": encoder.config.max_position_embeddings,
                },
                indent=2,
            )
        )
