"""`bertfit check` pools as `train` will: the pooling a sentence-transformers checkpoint
declares, said in the report, and its unused pooler not sent back to --pooling cls (issue 56)."""

from __future__ import annotations

import shutil

import pytest

import bertfit
from tests.checkpoints.test_pooling import write_pooling
from tests.checks.test_corpus import config_for, good_csv


@pytest.mark.slow  # two checks of a tiny run, one gradient step: ~12 s on 2 cores
def test_check_pools_as_the_checkpoint_declares_and_keeps_its_pooler_out(
    tmp_path, trainable_hf_dir
):
    model = write_pooling(shutil.copytree(trainable_hf_dir, tmp_path / "st"), "mean_tokens")
    config = config_for(model, good_csv(tmp_path / "t.csv", 32), batch_size=8)
    report = bertfit.check(config, compile=False)
    assert report.stats["pooling"] == (
        f"mean (declared by {model}'s 1_Pooling/config.json; --pooling overrides it)"
    )
    (pooler,) = [f for f in report.findings if f.code == "grad-pooler-unused"]
    assert pooler.severity == "info" and "--pooling mean" in pooler.why
    assert pooler.fix.startswith("none: the checkpoint's 1_Pooling/config.json declares")

    write_pooling(model, "max_tokens")
    (refused,) = bertfit.check(config, compile=False).findings
    assert refused.code == "config-invalid" and "which bertfit does not have" in refused.message
