"""Tiny random models of every family, written by transformers' own classes (`save_pretrained`:
the layout every Hugging Face checkpoint of the family has), for parity and end-to-end tests."""

from __future__ import annotations

from pathlib import Path

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def _configs(transformers) -> dict:
    """family → (model class, config) of a tiny random model."""
    return {
        "bert": (transformers.BertModel, transformers.BertConfig(**TINY, max_position_embeddings=64)),
        "electra": (
            transformers.ElectraModel,
            transformers.ElectraConfig(**TINY, embedding_size=16, max_position_embeddings=64),
        ),
        "distilbert": (
            transformers.DistilBertModel,
            transformers.DistilBertConfig(
                vocab_size=99,
                dim=32,
                n_layers=2,
                n_heads=4,
                hidden_dim=48,
                dropout=0.0,
                attention_dropout=0.0,
                max_position_embeddings=64,
            ),
        ),
        "albert": (
            transformers.AlbertModel,
            transformers.AlbertConfig(
                **{**TINY, "num_hidden_layers": 3},
                embedding_size=16,
                max_position_embeddings=64,
                classifier_dropout_prob=0.0,
            ),
        ),
        "roberta": (
            transformers.RobertaModel,
            transformers.RobertaConfig(
                **TINY, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1
            ),
        ),
        "xlm-roberta": (
            transformers.XLMRobertaModel,
            transformers.XLMRobertaConfig(
                **TINY, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1
            ),
        ),
    }


FAMILIES = ("bert", "electra", "distilbert", "albert", "roberta", "xlm-roberta")


def write_family_model(family: str, path: Path, seed: int = 0):
    """Writes a tiny `family` model with random weights (LayerNorms and biases too) to `path`
    with `save_pretrained`; returns the torch model, in eval mode."""
    import torch
    import transformers

    model_class, config = _configs(transformers)[family]
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "position_ids" not in name:
                parameter.normal_(0.0, 0.2)
    model.save_pretrained(path)
    return model
