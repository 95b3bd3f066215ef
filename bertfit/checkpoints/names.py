"""Where each encoder weight lives in each checkpoint format: one table per format.

Canonical names are `BertEncoder.named_variables()` keys. A format's table maps each canonical name
to the name in that format's files and a `Transform` that turns the stored array into the encoder's
layout (PyTorch stores dense kernels as [out, in], so they are transposed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

OPTIONAL = ("pooler/kernel", "pooler/bias")  # sentence-embedding checkpoints may drop the pooler

DENSE = ("attention/query", "attention/key", "attention/value", "attention/output",
         "intermediate", "output")
LAYER_NORMS = ("attention/layer_norm", "output/layer_norm")


def canonical_names(num_layers: int) -> list[str]:
    """All encoder weight names for a BERT with `num_layers` layers, in a stable order."""
    names = [f"embeddings/{e}" for e in
             ("word_embeddings", "position_embeddings", "token_type_embeddings")]
    names += ["embeddings/layer_norm/gamma", "embeddings/layer_norm/beta"]
    for i in range(num_layers):
        for d in DENSE:
            names += [f"layer_{i}/{d}/kernel", f"layer_{i}/{d}/bias"]
        for n in LAYER_NORMS:
            names += [f"layer_{i}/{n}/gamma", f"layer_{i}/{n}/beta"]
    return names + ["pooler/kernel", "pooler/bias"]


@dataclasses.dataclass(frozen=True)
class Source:
    """A stored tensor's name(s) and how to bring it into the encoder's layout."""

    names: tuple[str, ...]  # first is the one written; the others are older spellings
    to_encoder: Callable[[np.ndarray], np.ndarray] = lambda a: a
    from_encoder: Callable[[np.ndarray], np.ndarray] = lambda a: a


def _transposed(*names: str) -> Source:
    return Source(names, to_encoder=np.transpose, from_encoder=np.transpose)


# ---- Hugging Face (`BertModel` state dict; keys may carry a "bert." prefix) ----

_HF_DENSE = {
    "attention/query": "attention.self.query", "attention/key": "attention.self.key",
    "attention/value": "attention.self.value", "attention/output": "attention.output.dense",
    "intermediate": "intermediate.dense", "output": "output.dense",
}
_HF_NORMS = {"attention/layer_norm": "attention.output.LayerNorm",
             "output/layer_norm": "output.LayerNorm"}


def _hf_norm(prefix: str, param: str) -> Source:
    new, old = ("weight", "gamma") if param == "gamma" else ("bias", "beta")
    return Source((f"{prefix}.{new}", f"{prefix}.{old}"))


def hf_table(num_layers: int) -> dict[str, Source]:
    """Canonical name → Hugging Face `BertModel` state-dict key (without the "bert." prefix)."""
    table = {
        f"embeddings/{e}": Source((f"embeddings.{e}.weight",))
        for e in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    }
    for p in ("gamma", "beta"):
        table[f"embeddings/layer_norm/{p}"] = _hf_norm("embeddings.LayerNorm", p)
    for i in range(num_layers):
        for ours, theirs in _HF_DENSE.items():
            table[f"layer_{i}/{ours}/kernel"] = _transposed(f"encoder.layer.{i}.{theirs}.weight")
            table[f"layer_{i}/{ours}/bias"] = Source((f"encoder.layer.{i}.{theirs}.bias",))
        for ours, theirs in _HF_NORMS.items():
            for p in ("gamma", "beta"):
                table[f"layer_{i}/{ours}/{p}"] = _hf_norm(f"encoder.layer.{i}.{theirs}", p)
    table["pooler/kernel"] = _transposed("pooler.dense.weight")
    table["pooler/bias"] = Source(("pooler.dense.bias",))
    return table


# Tensors a HF checkpoint holds that are not encoder weights: known, so not "unexpected".
HF_IGNORED_PREFIXES = ("embeddings.position_ids", "cls.", "classifier.", "qa_outputs.")
