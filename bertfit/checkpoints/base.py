"""`Checkpoint`: what every format reader returns, so one function can fill the encoder."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bertfit.checkpoints.names import OPTIONAL, Source
from bertfit.model.config import BertConfig

if TYPE_CHECKING:
    from bertfit.checkpoints.detect import Detection
    from bertfit.checkpoints.savedmodel import SavedModelInfo


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint read into memory: architecture, stored tensors and how to name them.

    Args:
        format: a short format name ("hf", "tf1", ...), shown in reports.
        path: where it was read from.
        config: the encoder architecture.
        tensors: stored arrays under the format's own names.
        table: canonical encoder name → `Source` in this format.
        vocab_file: the WordPiece vocabulary, when the checkpoint has one.
        lower_case: the checkpoint's casing, when it says; None means "ask the vocab".
        strip_accents: None follows `lower_case`, as in BERT's tokenizer.
        ignored_prefixes: stored names that are known not to be encoder weights.
        optional: canonical names the checkpoint may lack (the pooler, by default).
        tokenizer_dir: the folder holding the tokenizer's files, when it has one.
        family: the encoder family ("BERT", "RoBERTa", ...).
        notes: guesses the reader made (shown by `bertfit inspect`).
        detection: the `detect()` result it was read from, when read through `read_detected`.
    """

    format: str
    path: Path
    config: BertConfig
    tensors: dict[str, np.ndarray]
    table: dict[str, Source]
    vocab_file: Path | None = None
    lower_case: bool | None = None
    strip_accents: bool | None = None
    ignored_prefixes: tuple[str, ...] = ()
    optional: tuple[str, ...] = OPTIONAL
    tokenizer_dir: Path | None = None
    family: str = "BERT"
    notes: list[str] = dataclasses.field(default_factory=list)
    detection: Detection | None = None


@dataclasses.dataclass
class OpaqueCheckpoint(Checkpoint):
    """A reusable SavedModel whose variables do not name a BERT: it is loaded whole
    (`checkpoints.savedmodel.SavedModelEncoder`)."""

    info: SavedModelInfo | None = None
