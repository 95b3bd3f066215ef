"""A run's checkpoints as files: one safetensors file each, written and read without
TensorFlow, the same on every Keras backend.

    checkpoints/latest/ckpt-120.safetensors     (120: the global step it was saved at)

A checkpoint holds the variables it was given by name (`bertfit.runs.weights`: `model/...`,
`optimizer/<i>/<name>`, `rng/<i>`), each in its own dtype (float32, bfloat16, the int8 kernels
and their scales, the RNG states' int64 or uint32, the optimizer's step counter), and the run's
`TrainingState` as JSON in the header's metadata (`training_state`): weights and state are one
file, so they never disagree. Any safetensors reader opens it (`safetensors.numpy.load_file`,
PyTorch's; bfloat16 is safetensors' BF16).

A save writes a temporary file beside its place (`.ckpt-120.safetensors.<pid>.tmp`, as
`bertfit.atomic` names them), fsyncs it and renames it into place, then removes the folder's
other checkpoints (each folder keeps one). A kill mid-save leaves the previous checkpoint whole
and current; `remove_leftovers` removes what the kill left when the run resumes. A folder's
current checkpoint is the one of the highest step.

Runs of an earlier bertfit hold TensorFlow checkpoints (`ckpt-N.index` and `ckpt-N.data-*`,
named by TensorFlow's `checkpoint` file): they are found here without TensorFlow, read where it
is installed (`bertfit.runs.tensorflow_checkpoint`), and replaced by the run's next save.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

import ml_dtypes  # noqa: F401  (numpy's bfloat16, the dtype safetensors reads BF16 as)
import numpy as np
from safetensors import SafetensorError, safe_open

from bertfit.atomic import leftover_of, temporary_path
from bertfit.errors import CheckpointError

SUFFIX = ".safetensors"
STATE = "training_state"  # the header's metadata key of the TrainingState's JSON
_FILE = re.compile(r"ckpt-(\d+)\.safetensors")
_TENSORFLOW_INDEX = "checkpoint"  # TensorFlow's list of the folder's checkpoints (earlier runs)
_DTYPES = {  # numpy's dtype name -> safetensors'
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "uint8": "U8",
    "bool": "BOOL",
}


def checkpoint_step(path: str | os.PathLike) -> int:
    """The global step a checkpoint was saved at, from its name.

    Examples:
    >>> checkpoint_step("run/checkpoints/best/ckpt-120.safetensors")
    120
    >>> checkpoint_step("run/checkpoints/best/ckpt-7")  # an earlier bertfit's
    7
    """
    return int(Path(path).name.removesuffix(SUFFIX).rpartition("-")[2])


def latest_checkpoint(directory: str | os.PathLike, not_copied: Iterable[str] = ()) -> str | None:
    """The path of `directory`'s current checkpoint: its `ckpt-N.safetensors` of the highest
    step, else the TensorFlow checkpoint an earlier bertfit saved there; None when there is
    none. `not_copied`: names of checkpoint files that are there but were not copied into a
    local copy of the folder (`bertfit.runs.run_dir.open_run`)."""
    directory = Path(directory)
    names = [p.name for p in directory.iterdir()] if directory.is_dir() else []
    names += not_copied
    steps = {int(found[1]): name for name in names if (found := _FILE.fullmatch(name))}
    if steps:
        return str(directory / steps[max(steps)])
    return _tensorflow_checkpoint(directory)


def _tensorflow_checkpoint(directory: Path) -> str | None:
    """The checkpoint prefix TensorFlow's `checkpoint` file in `directory` names (as
    `tf.train.latest_checkpoint` reads it), when its index is there."""
    try:
        index = (directory / _TENSORFLOW_INDEX).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(r'^model_checkpoint_path: "(.+)"$', index, re.MULTILINE)
    if found is None:
        return None
    prefix = directory / Path(found[1]).name  # beside its index, wherever the run was
    return str(prefix) if Path(f"{prefix}.index").is_file() else None


def save_checkpoint(
    directory: str | os.PathLike,
    step: int,
    arrays: Mapping[str, np.ndarray],
    state: str | None = None,
) -> str:
    """Writes `arrays` and `state` (a `TrainingState`'s JSON) as the checkpoint of `step` in
    `directory`, whole or not at all, then removes the folder's other checkpoints; returns its
    path.

    Raises:
        OSError: it could not be written (a full disk, a quota, a read-only file system): the
            temporary file is removed and the previous checkpoint stays the current one.
    """
    path = Path(directory) / f"ckpt-{step}{SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_path(path)
    try:
        with open(temporary, "wb") as file:
            _write(file, arrays, {} if state is None else {STATE: state})
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # saved: what is not removed now, a resume removes
        _remove_checkpoints(path.parent, keep={path.name})
    return str(path)


def _write(file, arrays: Mapping[str, np.ndarray], metadata: dict[str, str]) -> None:
    """safetensors' layout, one array at a time: the header's length (8 bytes, little-endian),
    the JSON header (each array's dtype, shape and byte range; padded to 8 bytes), the data."""
    arrays = {name: np.asarray(array, order="C") for name, array in arrays.items()}
    header: dict = {"__metadata__": metadata}
    offset = 0
    for name, array in arrays.items():
        end = offset + array.nbytes
        header[name] = {
            "dtype": _DTYPES[array.dtype.name],
            "shape": list(array.shape),
            "data_offsets": [offset, end],
        }
        offset = end
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    file.write(struct.pack("<Q", len(text)) + text)
    for array in arrays.values():
        file.write(array.reshape(-1).view(np.uint8).data)


def read_checkpoint(
    path: str | os.PathLike, names: Iterable[str]
) -> tuple[dict[str, np.ndarray], str | None]:
    """The arrays of those `names` that the checkpoint at `path` holds, and its
    `TrainingState`'s JSON (None in one without). An earlier bertfit's TensorFlow checkpoint is
    read with TensorFlow.

    Raises:
        CheckpointError: the file is damaged or not a checkpoint.
    """
    if not str(path).endswith(SUFFIX):
        from bertfit.runs.tensorflow_checkpoint import read_tensorflow_checkpoint

        return read_tensorflow_checkpoint(str(path), names)
    try:
        with safe_open(str(path), framework="np") as file:
            held = set(file.keys())
            arrays = {name: file.get_tensor(name) for name in names if name in held}
            return arrays, (file.metadata() or {}).get(STATE)
    except (SafetensorError, OSError) as e:
        raise CheckpointError(
            f"{path}: cannot read the checkpoint ({str(e).splitlines()[0]}). The file is "
            "truncated or not a bertfit checkpoint; resume the run from its latest checkpoint, "
            "or train it again."
        ) from None


def remove_leftovers(directory: str | os.PathLike) -> None:
    """Deletes what a killed save left in a checkpoint folder, keeping its current checkpoint:
    a temporary file, the checkpoint the last save replaced (a kill between the two), an
    earlier bertfit's TensorFlow files (a killed save's `ckpt-N_temp/` folder; all of them once
    a checkpoint of this format replaced them). Other files stay (a LoRA run's
    adapter_config.json)."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    current = latest_checkpoint(directory)
    if current is None:
        keep = set()
    elif current.endswith(SUFFIX):
        keep = {Path(current).name}
    else:  # an earlier bertfit's: its index, data files and `checkpoint` list
        stem = Path(current).name
        keep = {_TENSORFLOW_INDEX} | {p.name for p in directory.glob(f"{stem}.*")}
    _remove_checkpoints(directory, keep)


def _remove_checkpoints(directory: Path, keep: set[str]) -> None:
    """Deletes every checkpoint file in `directory` (either format's, finished or not) but
    those named in `keep`."""
    for entry in directory.iterdir():
        name = (leftover_of(entry.name) or (entry.name,))[0]
        ours = name.startswith("ckpt-") or name.split(".")[0] == _TENSORFLOW_INDEX
        if ours and entry.name not in keep:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def identifying_file(path: str | os.PathLike) -> Path:
    """The file whose bytes identify the checkpoint at `path`: itself, or an earlier bertfit's
    TensorFlow index (which holds a checksum of each of its tensors)."""
    return Path(path) if str(path).endswith(SUFFIX) else Path(f"{path}.index")
