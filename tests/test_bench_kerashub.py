"""bench/kerashub.py (issue 46): the padded batch it compares on, and its bertfit side measured
against transformers on a family KerasHub cannot read (so no keras-hub is needed here)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.kerashub import compare, padded_batch, table


def test_the_batch_pads_each_row_after_its_length_and_has_segments_only_where_used():
    batch = padded_batch(4, 16, pad_id=1, type_vocab_size=2)
    lengths = batch["mask"].sum(axis=1)
    assert lengths.tolist() == [16, 12, 8, 4]
    assert (batch["ids"][batch["mask"] == 0] == 1).all()
    assert (batch["types"][batch["mask"] == 0] == 0).all() and batch["types"].max() == 1
    assert padded_batch(4, 16, pad_id=1, type_vocab_size=1)["types"].max() == 0


@pytest.mark.slow
def test_bertfits_side_matches_transformers_and_the_table_names_the_missing_converter():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    config = transformers.ElectraConfig(
        vocab_size=30522,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
    )
    args = type("Args", (), {"batch": 3, "seq": 12})()
    row = compare("electra", config, args)
    assert row["bertfit_max_abs_diff"] < 1e-5 and row["bertfit_within_tolerance"]
    assert "no transformers converter" in row["keras_hub_error"]
    assert "| electra | " in table([row]) and "no transformers converter" in table([row])
    assert np.isfinite(row["bertfit_max_abs_diff"])
