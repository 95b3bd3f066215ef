"""Hugging Face directories of every supported family: `config.json` + safetensors (single or
sharded) or a PyTorch `.bin`, and the tokenizer's files (`tokenizer.json`, `vocab.txt`, ...)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.families import Family, family_of
from bertfit.checkpoints.names import hf_table
from bertfit.checkpoints.torch_bin import has_bin, read_torch_bin, shard_files
from bertfit.checkpoints.weights import read_weights
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.text.wordpiece import read_tokenizer_config

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"


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


def strip_prefix(tensors: dict[str, np.ndarray], family: Family) -> dict[str, np.ndarray]:
    """Task models' keys carry the family's prefix ("bert.", "roberta.", ...); base models'
    keys do not. Accept both."""

    def name(key: str) -> str:
        for prefix in family.prefixes:
            if key.startswith(prefix):
                return key[len(prefix) :]
        return key

    return {name(k): v for k, v in tensors.items()}


def read_hf_config(path: Path, notes: list[str] | None = None) -> tuple[Family, BertConfig]:
    """The family and architecture `path/config.json` describes; a family read from its
    `architectures` (no `model_type`) is said in `notes`."""
    file = path / "config.json"
    try:
        values = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{file}: cannot read the model config: {e}") from e
    if not isinstance(values, dict):
        raise CheckpointError(f"{file}: expected a JSON object, got {type(values).__name__}.")
    family = family_of(values, file)
    if "model_type" not in values and values.get("architectures"):
        values = {**values, "model_type": family.model_types[0]}
        if notes is not None:
            notes.append(
                f"config.json has no model_type; read as {family.name} from its architectures "
                f"{values['architectures']}"
            )
    try:
        return family, family.read_config(values)
    except (TypeError, KeyError) as e:
        raise CheckpointError(
            f"{file}: not a complete {family.name} config ({type(e).__name__}: {e})."
        ) from e


def read_hf(path: Path) -> Checkpoint:
    """Reads a HF directory of any supported family: safetensors ("hf") or, without them, a
    `.bin` ("hf-bin")."""
    notes: list[str] = []
    family, config = read_hf_config(path, notes)
    safetensors = has_safetensors(path)
    tensors = strip_prefix(read_safetensors(path) if safetensors else read_torch_bin(path), family)
    vocab = path / "vocab.txt"
    tokenizer = read_tokenizer_config(path)
    return Checkpoint(
        format="hf" if safetensors else "hf-bin",
        path=path,
        config=config,
        tensors=tensors,
        table=family.table(config),
        vocab_file=vocab if vocab.is_file() else None,
        ignored_prefixes=family.ignored,
        optional=family.optional,
        tokenizer_dir=path,
        family=family.name,
        lower_case=tokenizer.get("lower_case"),
        strip_accents=tokenizer.get("strip_accents"),
        notes=notes,
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
