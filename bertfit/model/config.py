"""`BertConfig`: the architecture of a BERT encoder, as BERT's `bert_config.json` describes it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bertfit.errors import CheckpointError

# A checkpoint's `hidden_act` → the `keras.activations` function and its arguments (the names
# are Hugging Face's: "gelu" is the exact erf GELU, the others its tanh approximation).
ACTIVATIONS = {
    "gelu": ("gelu", {"approximate": False}),
    "gelu_new": ("gelu", {"approximate": True}),
    "gelu_pytorch_tanh": ("gelu", {"approximate": True}),
    "gelu_fast": ("gelu", {"approximate": True}),
    "relu": ("relu", {}),
    "silu": ("silu", {}),
    "swish": ("silu", {}),
    "tanh": ("tanh", {}),
}


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of a BERT encoder.

    Field names follow Hugging Face's `BertConfig`, which keeps Google's `bert_config.json` names,
    so both files load with `BertConfig.from_dict`.

    Examples:
    >>> BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2,
    ...            num_attention_heads=4, intermediate_size=128).head_size
    16
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise CheckpointError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}; check the checkpoint's config file."
            )
        if self.hidden_act not in ACTIVATIONS:
            raise CheckpointError(
                f"hidden_act {self.hidden_act!r} is not supported; bertfit supports "
                f"{tuple(ACTIVATIONS)}."
            )

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, values: dict) -> BertConfig:
        """Builds a config from a HF `config.json` or Google `bert_config.json` dict; extra keys
        are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in values.items() if k in names}
        if "layer_norm_eps" not in values and "layer_norm_epsilon" in values:
            kwargs["layer_norm_eps"] = values["layer_norm_epsilon"]
        return cls(**kwargs)

    @classmethod
    def from_json_file(cls, path: str | Path) -> BertConfig:
        try:
            values = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{path}: cannot read the model config: {e}") from e
        try:
            return cls.from_dict(values)
        except TypeError as e:
            raise CheckpointError(f"{path}: unexpected model config: {e}") from e

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_hf_dict(self) -> dict:
        """The `config.json` a Hugging Face `BertModel` loads."""
        return {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
            **self.to_dict(),
        }
