"""Fixtures of the checkpoint tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tf_hub_export(tmp_path_factory, trainable_hf_dir):
    """The tiny trainable BERT through `bertfit convert --to tf-hub --seq-length 16`: a folder
    with TF Hub's `preprocess/` and `encoder/` SavedModels (~35 s to write, so written once)."""
    from bertfit.cli import main

    out = tmp_path_factory.mktemp("tf_hub_export")
    argv = ["convert", str(trainable_hf_dir), str(out), "--to", "tf-hub", "--seq-length", "16"]
    assert main(argv) == 0
    return out
