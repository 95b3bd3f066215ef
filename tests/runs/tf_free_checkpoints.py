"""The child process of `test_checkpoint_files.py`'s TensorFlow-free test: run under
`tests.without_tensorflow` with `KERAS_BACKEND=jax`, it saves a run's checkpoints (`latest` with
the optimizer and the RNG states, `best`, the LoRA `adapter`) of two tiny LoRA'd classifiers with
dropout, one on an int8 base and one on a bfloat16 base, changes every variable, restores
`latest`, and prints one JSON line: the variables that did not come back exactly, the dtypes in
the file, the files written and the modules loaded. The parent restores the same files on
TensorFlow.

    KERAS_BACKEND=jax python -m tests.without_tensorflow tests.runs.tf_free_checkpoints FOLDER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import keras
import numpy as np
from safetensors import safe_open

from bertfit.model.chunked import ChunkedClassifier
from bertfit.model.classifier import BertClassifier
from bertfit.model.encoder import BertEncoder
from bertfit.model.int8 import quantize_base
from bertfit.model.lora import adapted_layers, enable_lora
from bertfit.runs.checkpoint_files import latest_checkpoint
from bertfit.runs.weights import checkpoint_variables
from bertfit.training.checkpointing import RunCheckpoints, TrainingState
from tests.model.test_backends import CONFIGS

BASES = ("int8", "bf16")  # --base-precision


def classifier(base: str) -> ChunkedClassifier:
    """A tiny LoRA'd classifier with dropout (RNG states to save) on an int8 or bf16 base.
    The encoder starts at zeros (`scramble` draws every value): on JAX each random weight
    shape is an XLA compilation, 7 s of this process's 16."""
    dtype = "bfloat16" if base == "bf16" else "float32"
    encoder = BertEncoder(CONFIGS["bert"], random_init=False, dtype=dtype)
    model = ChunkedClassifier(BertClassifier(encoder, 3, "mean", dropout=0.1, seed=0), "attention")
    model.build()
    if base == "int8":
        quantize_base(adapted_layers(model).values())
    enable_lora(model, rank=2, alpha=4, targets=("auto",), seed=0)
    return model


def trainer(base: str):
    """The classifier and a built AdamW."""
    model = classifier(base)
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def scramble(variables: dict, seed: int) -> None:
    """Every variable random in its own dtype: a strict comparison."""
    rng = np.random.default_rng(seed)
    for v in variables.values():
        dtype = np.dtype(keras.backend.standardize_dtype(v.dtype))
        if np.issubdtype(dtype, np.integer):
            v.assign(rng.integers(0, 100, v.shape).astype(dtype))
        else:
            v.assign(rng.normal(0, 0.3, v.shape).astype(dtype))


def values(variables: dict) -> dict[str, np.ndarray]:
    return {name: keras.ops.convert_to_numpy(v.value) for name, v in variables.items()}


def saved_and_restored(base: str, folder: Path) -> dict:
    model, optimizer = trainer(base)
    variables = checkpoint_variables(model, optimizer)
    scramble(variables, seed=1)
    saved = values(variables)
    latest, best, adapter = (folder / base / name for name in ("latest", "best", "adapter"))
    checkpoints = RunCheckpoints(model, optimizer, latest, best, adapter_dir=adapter)
    state = TrainingState(epoch=1, step=3, global_step=9)
    checkpoints.save_latest(state)
    checkpoints.save_best(state)

    scramble(variables, seed=2)  # changed since the save: the restore brings back every value
    restored = checkpoints.restore_latest()
    now = values(variables)
    with safe_open(latest_checkpoint(latest), framework="np") as file:
        dtypes = sorted({str(file.get_tensor(name).dtype) for name in file.keys()})
    return {
        "state_restored": restored == state,
        "rng_states": sum(name.startswith("rng/") for name in variables),
        "different": [
            name for name, value in saved.items() if not np.array_equal(value, now[name])
        ],
        "dtypes": dtypes,
        "files": sorted(p.relative_to(folder).as_posix() for p in folder.rglob(f"{base}/*/*")),
    }


def main() -> None:
    assert keras.backend.backend() == "jax"
    folder = Path(sys.argv[1])
    report = {base: saved_and_restored(base, folder) for base in BASES}
    report["loaded"] = sorted(
        {name.split(".")[0] for name, module in sys.modules.items() if module}
        & {"tensorflow", "tensorflow_text", "tf_keras"}
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
