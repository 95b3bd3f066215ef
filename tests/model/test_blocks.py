"""Every registered family keeps the layer contract's naming (model/blocks.py): each weight of
its encoder is named once, under the prefixes the checkpoint name tables use."""

from __future__ import annotations

import dataclasses

import keras
import pytest

from bertfit.model.blocks import FamilyLayers, FamilyParts
from bertfit.model.encoder import FAMILY_LAYERS, BertEncoder
from bertfit.model.modernbert import ModernBertSettings
from tests.tiny import TINY_CONFIG as TINY

LAYERS = tuple(f"layer_{i}/" for i in range(TINY.num_hidden_layers))
PREFIXES = ("embeddings/", *LAYERS, "encoder/", "pooler/")


@pytest.mark.parametrize("model_type", ["bert", *FAMILY_LAYERS])
def test_every_weight_of_a_family_is_named_once(model_type):
    encoder = BertEncoder(dataclasses.replace(TINY, model_type=model_type))
    named = encoder.named_variables()
    assert all(name.startswith(PREFIXES) for name in named), sorted(named)
    assert sorted(id(v) for v in named.values()) == sorted(id(w) for w in encoder.trainable_weights)


def test_the_registry_holds_family_layers_not_names():
    for family in FAMILY_LAYERS.values():
        assert isinstance(family, FamilyLayers)
        assert issubclass(family.layer, keras.layers.Layer)
        assert family.parts is None or issubclass(family.parts, FamilyParts)


@pytest.mark.parametrize("norm_bias", [False, True])
def test_modernbert_norms_have_a_bias_only_when_its_settings_say_so(norm_bias):
    settings = dataclasses.asdict(ModernBertSettings(norm_bias=norm_bias))
    config = dataclasses.replace(TINY, model_type="modernbert", variant=settings)
    betas = [name for name in BertEncoder(config).named_variables() if name.endswith("/beta")]
    expected = {"embeddings/layer_norm/beta", "encoder/final_norm/beta"}
    assert expected <= set(betas) if norm_bias else betas == []
