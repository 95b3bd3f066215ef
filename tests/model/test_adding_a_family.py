"""docs/adding_a_family.md works as written: its two files and its registry edits, applied to a
copy of bertfit, load one more family (RoFormer) that computes what transformers computes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.test_readme import run_python

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding_a_family.md"


def page_blocks(language: str) -> dict[str, str]:
    """The page's ```language blocks by the path on their first line (`# bertfit/...`)."""
    blocks = re.findall(rf"```{language}\n# (\S+)\n(.*?)```", PAGE.read_text(), re.S)
    return dict(blocks)


def apply_diff(text: str, diff: str) -> str:
    """`text` with each hunk of `diff` (hunks split by "@@"; lines " " kept, "-" removed, "+"
    added) applied where its old lines occur, which must be exactly once."""
    for hunk in diff.split("@@\n"):
        lines = hunk.splitlines(keepends=True)
        old = "".join(line[1:] for line in lines if line[0] in " -")
        new = "".join(line[1:] for line in lines if line[0] in " +")
        assert text.count(old) == 1, f"the page's lines\n{old}are not once in the file"
        text = text.replace(old, new)
    return text


def test_the_page_adds_two_files_and_edits_the_two_registries():
    assert sorted(page_blocks("python")) == [
        "bertfit/checkpoints/families/roformer.py",
        "bertfit/model/roformer.py",
    ]
    diffs = page_blocks("diff")
    assert sorted(diffs) == ["bertfit/checkpoints/families/__init__.py", "bertfit/model/encoder.py"]
    for path, diff in diffs.items():  # the page's context lines are the registries' lines today
        assert "roformer" in apply_diff((ROOT / path).read_text(), diff)


TRANSFORMERS_PARITY = """
from pathlib import Path

import numpy as np, torch, transformers
from bertfit.checkpoints.families import supported_names
from bertfit.checkpoints.hf import read_hf
from bertfit.checkpoints.load import build_encoder

config = transformers.RoFormerConfig(
    vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=48, max_position_embeddings=64, hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
torch.manual_seed(0)
reference = transformers.RoFormerModel(config).eval()
with torch.no_grad():
    for name, parameter in reference.named_parameters():
        if "embed_positions" not in name:  # the fixed sinusoidal table stays
            parameter.normal_(0.0, 0.2)
reference.save_pretrained("roformer")

encoder = build_encoder(read_hf(Path("roformer")))
report = encoder.load_report
assert not report.unexpected and not report.missing, (report.unexpected, report.missing)
ids = np.random.default_rng(3).integers(5, 99, (2, 12)).astype("int32")
mask = np.ones_like(ids)
mask[1, 7:] = 0
types = np.zeros_like(ids)
types[0, 6:] = 1
ours = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
with torch.no_grad():
    theirs = reference(
        input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
        token_type_ids=torch.tensor(types),
    ).last_hidden_state.numpy()
real = mask.astype(bool)
np.testing.assert_allclose(ours["sequence_output"].numpy()[real], theirs[real], atol=1e-4)
pooled = encoder(
    {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}, pooled_only=True
)["pooled_output"]
np.testing.assert_allclose(pooled.numpy(), theirs[:, 0], atol=1e-4)
print("families:", supported_names())
"""


@pytest.mark.slow
def test_the_page_loads_roformer_as_transformers_computes_it(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    shutil.copytree(ROOT / "bertfit", tmp_path / "bertfit", ignore=shutil.ignore_patterns("*.pyc"))
    for path, code in page_blocks("python").items():
        (tmp_path / path).write_text(code)
    for path, diff in page_blocks("diff").items():
        (tmp_path / path).write_text(apply_diff((tmp_path / path).read_text(), diff))
    out = run_python(TRANSFORMERS_PARITY, tmp_path, PYTHONPATH=str(tmp_path))
    assert "RoFormer" in out
