"""`bertfit convert SRC DST --to hf|tf-hub`: any loadable checkpoint into another format."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from bertfit.checkpoints.hf import write_hf
from bertfit.checkpoints.load import (
    build_encoder,
    build_tokenizer,
    checkpoint_tokenizer_kind,
    read_checkpoint,
)
from bertfit.checkpoints.registry import resolve
from bertfit.config import CONVERT_TARGETS, check_positions
from bertfit.errors import CheckpointError

MIN_SEQ_LENGTH = 8  # as `--max-seq-length` in training (`RunConfig.validate`)


def convert(
    source: str | Path, destination: str | Path, to: str, seq_length: int | None = None
) -> dict[str, Path]:
    """Writes the checkpoint at `source` under `destination`; returns what was written.

    `to="hf"`: a HF `BertModel` directory (model.safetensors, config.json, vocab.txt,
    tokenizer_config.json). `to="tf-hub"`: `destination/encoder` (a reusable TF Hub-style
    SavedModel) and `destination/preprocess` (strings → the three inputs, `seq_length` long:
    default 128, or the model's position table when that is shorter). Written into a temporary
    folder beside `destination` and renamed into place: whole or not at all, so a refused or
    failed conversion leaves nothing that blocks the rerun.
    """
    if to not in CONVERT_TARGETS:
        raise CheckpointError(f"--to {to!r} is not a target; choose one of {CONVERT_TARGETS}.")
    if seq_length is not None and seq_length < MIN_SEQ_LENGTH:
        raise CheckpointError(
            f"--seq-length {seq_length}: the preprocessing model packs [CLS], the tokens and "
            f"[SEP] into that many positions; use at least {MIN_SEQ_LENGTH} (as --max-seq-length "
            "in training), or leave it out for 128."
        )
    destination = Path(destination)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise CheckpointError(f"{destination} exists and is not empty; pick a new folder.")
    temporary = destination.absolute().with_name(f".{destination.name}.tmp-{os.getpid()}")
    temporary.parent.mkdir(parents=True, exist_ok=True)
    try:
        written = _convert(source, temporary, to, seq_length)
        if destination.exists():
            destination.rmdir()  # empty, checked above
        os.replace(temporary, destination)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return {what: destination / Path(path).relative_to(temporary) for what, path in written.items()}


def _convert(source, destination: Path, to: str, seq_length: int | None) -> dict[str, Path]:
    """`convert` into `destination` (a temporary folder renamed into place by the caller)."""
    checkpoint = read_checkpoint(resolve(source))
    encoder = build_encoder(checkpoint)
    if not hasattr(encoder, "named_variables"):
        raise CheckpointError(
            f"{source} is a SavedModel whose variables do not name a BERT, so bertfit cannot "
            "rewrite it as another format; use it as it is with load_encoder()."
        )
    lower = True if checkpoint.lower_case is None else checkpoint.lower_case
    if to == "hf" and encoder.config.model_type != "bert":
        raise CheckpointError(
            f"{source} is a {checkpoint.family} encoder; convert --to hf writes BERT-architecture "
            "encoders only (a Hugging Face checkpoint of another family needs no conversion)."
        )
    if to == "hf":
        write_hf(encoder, None, destination, vocab_file=checkpoint.vocab_file, lower_case=lower)
        return {"hf": destination}
    from bertfit.checkpoints.hub_export import write_hub_encoder, write_hub_preprocessor

    positions = encoder.config.max_sequence_length
    if seq_length is None:
        seq_length = min(128, positions)
    check_positions(seq_length, positions, str(source), flag="--seq-length")

    written = {
        "encoder": write_hub_encoder(encoder, destination / "encoder", checkpoint.vocab_file, lower)
    }
    if checkpoint_tokenizer_kind(checkpoint) is not None:
        written["preprocess"] = write_hub_preprocessor(
            build_tokenizer(checkpoint), destination / "preprocess", seq_length
        )
    (destination / "README.json").write_text(
        json.dumps(
            {
                "source": str(source),
                "source_format": checkpoint.format,
                "encoder": "encoder/ (hub.KerasLayer(path, trainable=True))",
                "preprocess": "preprocess/ (needs `import tensorflow_text`)",
            },
            indent=2,
        )
    )
    return written
