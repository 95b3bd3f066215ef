"""`BertConfig`: the architecture of an encoder of any supported family (BERT and its relatives:
ELECTRA, DistilBERT, ALBERT, RoBERTa, XLM-R, DeBERTa-v3, ModernBERT, MPNet, GTE, NomicBERT,
EuroBERT), in BERT's terms.

The BERT fields are those of BERT's `bert_config.json`; a family's differences are a few more
fields, each off (BERT's behaviour) by default. Hugging Face `config.json` files of each family are
translated into this config by `bertfit.checkpoints.families`."""

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
    # ---- family variations (BERT's behaviour by default) ----
    model_type: str = "bert"  # the family, as Hugging Face's config.json names it
    embedding_size: int | None = None  # factorised embeddings, projected to hidden_size
    position_offset: int = 0  # RoBERTa/XLM-R: the first token's position id (padding_idx + 1)
    absolute_positions: bool = True  # False: no position table (DeBERTa-v3, ModernBERT, GTE...)
    share_layers: bool = False  # ALBERT: one layer's weights in every layer
    has_pooler: bool = True  # False: no dense+tanh pooler (its [CLS] vector is used as is)
    pad_token_id: int = 0
    # The settings of families whose layers differ from BERT's (`model/deberta.py`,
    # `model/modernbert.py`), as plain dicts of those modules' settings dataclasses.
    variant: dict = dataclasses.field(default_factory=dict)

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

    @property
    def embedding_width(self) -> int:
        """The width of the embedding tables (`hidden_size` unless factorised)."""
        return self.embedding_size or self.hidden_size

    @property
    def max_sequence_length(self) -> int | None:
        """The longest input the position table allows (None: no position table)."""
        if not self.absolute_positions:
            return self.variant.get("max_sequence_length", self.max_position_embeddings)
        return self.max_position_embeddings - self.position_offset

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
        """The `config.json` a Hugging Face `BertModel` loads (BERT-family encoders only)."""
        if self.model_type != "bert":
            raise CheckpointError(
                f"writing a {self.model_type} encoder as a Hugging Face BertModel is not "
                "supported; convert --to hf writes BERT-architecture encoders only."
            )
        bert_fields = {f.name for f in dataclasses.fields(BertConfig)} - set(FAMILY_FIELDS)
        return {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
            **{k: v for k, v in self.to_dict().items() if k in bert_fields},
        }


FAMILY_FIELDS = (
    "model_type",
    "embedding_size",
    "position_offset",
    "absolute_positions",
    "share_layers",
    "has_pooler",
    "pad_token_id",
    "variant",
)


def forward_flops_per_token(
    hidden_size: int, intermediate_size: int, num_hidden_layers: int, seq_length: int
) -> float:
    """The matrix-product FLOPs of one encoder forward pass per token: per layer the four
    attention projections (8 h²), the feed-forward pair (4 h i) and the attention scores and
    weighted sum (4 s h). Embedding lookups, norms and heads are left out, as MFU
    conventionally does (PaLM, appendix B).

    Examples:
    >>> forward_flops_per_token(384, 1536, 6, 64)  # MiniLM-L6 at 64 tokens: 21.8 MFLOP
    21823488
    """
    h, i = hidden_size, intermediate_size
    return num_hidden_layers * (8 * h * h + 4 * h * i + 4 * seq_length * h)
