"""TF1 Hub modules (`tfhub_module.pb` + a TF1 SavedModel + `variables/`).

TF2 cannot fine-tune these: `hub.KerasLayer` loads a TF1 module with no trainable variables.
bertfit instead reads the module's variables checkpoint (Google's `bert/...` names) into the native
encoder, which fine-tunes in TF2 like any other checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.names import TF1_IGNORED_PREFIXES
from bertfit.checkpoints.savedmodel import read_proto, signatures_of
from bertfit.checkpoints.tf1 import casing_in, read_google, sentencepiece_dir, vocab_in
from bertfit.errors import CheckpointError


def module_signatures(path: Path) -> dict[str, dict]:
    return signatures_of(read_proto(path).meta_graphs[0])


def read_hub_module(path: Path) -> Checkpoint:
    """Reads a TF1 Hub BERT module's variables into a `Checkpoint` with Google's names."""
    prefix = path / "variables" / "variables"
    if not Path(f"{prefix}.index").is_file():
        raise CheckpointError(
            f"{path}: a TF1 Hub module without variables/variables.index, so its weights are "
            "missing (a truncated download or extraction?). Fetch the whole module again."
        )
    google = read_google(prefix, path, path / "assets", path)
    vocab = vocab_in(path)
    return Checkpoint(
        format="tf1-hub-module",
        path=path,
        config=google.config,
        tensors=google.tensors,
        table=google.table,
        vocab_file=vocab,
        lower_case=module_lower_case(path),
        tokenizer_dir=sentencepiece_dir(path / "assets") if vocab is None else None,
        ignored_prefixes=TF1_IGNORED_PREFIXES,
        family=google.family,
        notes=google.notes,
    )


def module_lower_case(path: Path) -> bool | None:
    """`do_lower_case` from the module's `tokenization_info` signature, as Google's BERT modules
    publish it; else a `tokenizer_config.json`; else None (the vocab decides)."""
    if "tokenization_info" in module_signatures(path):
        try:
            import tensorflow_text  # noqa: F401  (a module's preprocessing may use its ops)

            loaded = tf.saved_model.load(str(path), tags=[])
            info = loaded.signatures["tokenization_info"]()
            return bool(info["do_lower_case"].numpy())
        except Exception:  # a broken signature only loses the casing hint
            pass
    return casing_in(path / "assets", path)
