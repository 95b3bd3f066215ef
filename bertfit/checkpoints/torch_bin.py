"""PyTorch `pytorch_model.bin` state dicts, read only with torch and `weights_only=True`.

A `.bin` is a pickle, and unpickling runs code. bertfit never unpickles it itself: it asks torch
to load it with `weights_only=True` (tensors only), and without torch it refuses and says how to
convert the file to safetensors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bertfit.errors import CheckpointError, MissingDependencyError

BIN = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"

CONVERT_HINT = (
    "Convert it to safetensors once, where torch and transformers are installed:\n"
    '    python -c "from transformers import BertModel; '
    "BertModel.from_pretrained('DIR').save_pretrained('DIR', safe_serialization=True)\"\n"
    "or install torch (pip install 'bertfit[torch]') so bertfit can read it safely."
)


def has_bin(path: Path) -> bool:
    return (path / BIN).is_file() or (path / BIN_INDEX).is_file()


def shard_files(path: Path, single: str, index_name: str) -> list[Path]:
    """`path/single`, or every shard the HF index `path/index_name` names in its weight_map."""
    index = path / index_name
    if index.is_file():
        return sorted({path / f for f in json.loads(index.read_text())["weight_map"].values()})
    return [path / single]


def read_torch_bin(path: Path) -> dict[str, np.ndarray]:
    """All tensors of `pytorch_model.bin` (or of every shard its index names)."""
    try:
        import torch
    except ImportError as e:
        raise MissingDependencyError(
            f"{path / BIN} is a PyTorch pickle. bertfit reads it only through torch with "
            "weights_only=True and never unpickles it otherwise, and torch is not installed. "
            + CONVERT_HINT
        ) from e
    tensors: dict[str, np.ndarray] = {}
    for file in shard_files(path, BIN, BIN_INDEX):
        try:
            state = torch.load(str(file), map_location="cpu", weights_only=True)
        except FileNotFoundError as e:
            raise CheckpointError(f"{file}: the shard is missing; download it again.") from e
        except Exception as e:  # torch raises UnpicklingError, RuntimeError, ...
            raise CheckpointError(
                f"{file}: torch.load(weights_only=True) refused or failed ({str(e)[:200]}). The "
                "file is truncated, or holds objects other than tensors, which bertfit will not "
                "unpickle. " + CONVERT_HINT
            ) from e
        if not isinstance(state, dict):
            raise CheckpointError(
                f"{file}: not a state dict (a {type(state).__name__}). " + CONVERT_HINT
            )
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[name] = value.detach().to(torch.float32).numpy()
    return tensors
