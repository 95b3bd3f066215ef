"""A pruned vocabulary: the ids of a tokenizer's vocabulary that a model keeps, renumbered.

`bertfit distill --prune-vocab` keeps the word embeddings of the tokens its texts use, and every
special token: the kept ids, in increasing order, are `vocab_map.npy` beside the tokenizer's
files, and the kept id `kept[i]` becomes id i. The tokenizer still tokenizes with its whole
vocabulary (a WordPiece with pieces missing would split an unseen word otherwise), then each id
is renumbered (`renumbering`); an id not kept becomes the unknown token's. In the graph that is
`bertfit.text.pruned.PrunedTokenizer`, on the host `bertfit.text.host.HostTokenizer`.
TensorFlow-free: checkpoints read it to size the embedding table.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from bertfit.errors import CheckpointError

VOCAB_MAP_FILE = "vocab_map.npy"


def kept_ids(used: np.ndarray, specials: Iterable[int]) -> np.ndarray:
    """The ids kept: those `used` (any shape) and the `specials`, once each, increasing.

    Examples:
    >>> kept_ids(np.array([[7, 3], [3, 9]]), [0, 100]).tolist()
    [0, 3, 7, 9, 100]
    """
    return np.union1d(np.asarray(used, np.int64).ravel(), list(specials)).astype(np.int32)


def renumbering(kept: np.ndarray, vocab_size: int, unk_id: int) -> np.ndarray:
    """int32 [vocab_size]: each id's new id, its rank in `kept`; an id not kept gets the
    unknown token's (`unk_id`, an id of the whole vocabulary, must be kept).

    Examples:
    >>> renumbering(np.array([0, 3, 7]), 9, unk_id=0).tolist()
    [0, 0, 0, 1, 0, 0, 0, 2, 0]
    """
    rank = np.searchsorted(kept, unk_id)
    if rank == len(kept) or kept[rank] != unk_id:
        raise CheckpointError(
            f"the pruned vocabulary does not keep the unknown token (id {unk_id}); every "
            "special token must be kept."
        )
    new_ids = np.full(vocab_size, rank, np.int32)
    new_ids[kept] = np.arange(len(kept), dtype=np.int32)
    return new_ids


def write_vocab_map(folder: str | os.PathLike, kept: np.ndarray) -> None:
    with open(Path(folder) / VOCAB_MAP_FILE, "wb") as file:
        np.save(file, np.asarray(kept, np.int32), allow_pickle=False)


def read_vocab_map(folder: str | os.PathLike, vocab_size: int) -> np.ndarray | None:
    """The kept ids of `folder`'s `vocab_map.npy` (None without one), checked against the
    `vocab_size` ids of the tokenizer beside it."""
    path = Path(folder) / VOCAB_MAP_FILE
    if not path.is_file():
        return None
    try:
        kept = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise CheckpointError(
            f"{path}: not a vocabulary map bertfit wrote ({error}); restore it from the run."
        ) from error
    fits = kept.ndim == 1 and kept.dtype.kind in "iu" and len(kept) > 0
    if not fits or np.any(np.diff(kept) <= 0) or kept[0] < 0 or kept[-1] >= vocab_size:
        raise CheckpointError(
            f"{path}: expected increasing ids of the {vocab_size}-token vocabulary beside it; "
            "restore it from the run that wrote it."
        )
    return kept.astype(np.int32)
