"""A run's model as inference restores it (`bertfit.inference.run_model`)."""

from __future__ import annotations

import dataclasses

from bertfit.inference.run_model import restored_model
from bertfit.runs.run_dir import open_run


def test_the_restored_model_computes_attention_as_the_config_says(trained_run):
    """`--attention` reaches every layer of the encoder (~0.5 s after the shared run)."""
    _, summary = trained_run
    run_dir = open_run(summary.run_dir)
    config = run_dir.load_config()
    assert config.model.attention == "auto"  # the default, saved with the run
    config.model = dataclasses.replace(config.model, attention="fused")
    model = restored_model(run_dir, config, run_dir.load_task())
    implementations = {
        layer.attention_implementation
        for layer in model._flatten_layers()
        if hasattr(layer, "attention_implementation")
    }
    assert implementations == {"fused"}
