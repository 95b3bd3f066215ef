"""ELECTRA discriminators (`ElectraModel`): BERT's layers, embeddings of `embedding_size`
projected to the hidden size (`embeddings_project`), no pooler."""

from __future__ import annotations

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import HF_IGNORED_PREFIXES, Source, hf_table, transposed
from bertfit.model.config import BertConfig


def read_config(values: dict) -> BertConfig:
    embedding_size = values.get("embedding_size") or values["hidden_size"]
    return BertConfig.from_dict(
        {
            **values,
            "model_type": "electra",
            "embedding_size": embedding_size if embedding_size != values["hidden_size"] else None,
            "has_pooler": False,
        }
    )


def table(config: BertConfig) -> dict[str, Source]:
    names = {k: v for k, v in hf_table(config.num_hidden_layers).items() if "pooler" not in k}
    if config.embedding_size is not None:
        names["embeddings/projection/kernel"] = transposed("embeddings_project.weight")
        names["embeddings/projection/bias"] = Source(("embeddings_project.bias",))
    return names


FAMILY = Family(
    name="ELECTRA",
    model_types=("electra",),
    tokenizer="wordpiece",
    hf_class="Electra",
    read_config=read_config,
    table=table,
    prefixes=("electra.",),
    ignored=HF_IGNORED_PREFIXES + ("discriminator_predictions.", "generator_"),
)
