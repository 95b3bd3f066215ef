"""The child process of `test_families.py`'s JAX parity test: run with `KERAS_BACKEND=jax`, it
loads each Hugging Face checkpoint folder given into bertfit's encoder and writes its
sequence output for the inputs saved beside it.

    KERAS_BACKEND=jax python -m tests.model.jax_family_outputs FOLDER [FOLDER ...]

Each FOLDER holds the checkpoint and `inputs.npz`; the output goes to `FOLDER/jax.npy`."""

from __future__ import annotations

import sys
from pathlib import Path

import keras
import numpy as np

from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder


def main(folders: list[str]) -> None:
    assert keras.backend.backend() == "jax"
    for folder in map(Path, folders):
        inputs = dict(np.load(folder / "inputs.npz"))
        sequence = build_encoder(read_hf(folder))(inputs)["sequence_output"]
        np.save(folder / "jax.npy", keras.ops.convert_to_numpy(sequence))


if __name__ == "__main__":
    main(sys.argv[1:])
