"""The pooling a checkpoint declares (sentence-transformers' modules.json and
1_Pooling/config.json) and the run's pooling when --pooling is not given (issue 56)."""

from __future__ import annotations

import json

import pytest

from bertfit.checkpoints.pooling import DeclaredPooling, decide_pooling, declared_pooling
from bertfit.checkpoints.registry import resolve
from bertfit.errors import CheckpointError, ConfigError

ST = "sentence_transformers.models"
MODULES = [  # all-MiniLM-L6-v2's
    {"idx": 0, "name": "0", "path": "", "type": f"{ST}.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{ST}.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": f"{ST}.Normalize"},
]


def write_pooling(folder, *modes: str, modules=MODULES, path: str = "1_Pooling"):
    """The sentence-transformers files of a model pooled by `modes` ("mean_tokens", ...)."""
    if modules is not None:
        (folder / "modules.json").write_text(json.dumps(modules))
    flags = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")
    (folder / path).mkdir(parents=True, exist_ok=True)
    config = {"word_embedding_dimension": 32} | {f"pooling_mode_{f}": f in modes for f in flags}
    (folder / path / "config.json").write_text(json.dumps(config))
    return folder


def test_the_packaged_minilm_declares_mean_pooling():
    declared = declared_pooling(resolve("minilm-l6"))
    assert declared == DeclaredPooling(("mean_tokens",), "1_Pooling/config.json")
    assert decide_pooling(None, declared, "minilm-l6") == (
        "mean",
        "pooling: mean (declared by minilm-l6's 1_Pooling/config.json; --pooling overrides it)",
    )


def test_a_checkpoint_without_sentence_transformers_files_pools_with_cls(tmp_path):
    assert declared_pooling(tmp_path) is None
    assert declared_pooling(tmp_path / "model.ckpt") is None  # a TF1 checkpoint's prefix
    assert decide_pooling(None, None) == ("cls", None)
    assert decide_pooling("mean", None) == ("mean", None)


def test_modules_json_names_the_pooling_folder(tmp_path):
    modules = [{**m, "path": "pool"} if m["name"] == "1" else m for m in MODULES]
    write_pooling(tmp_path, "cls_token", modules=modules, path="pool")
    assert declared_pooling(tmp_path) == DeclaredPooling(("cls_token",), "pool/config.json")
    assert decide_pooling(None, declared_pooling(tmp_path))[0] == "cls"


def test_a_pooling_folder_without_modules_json_is_read(tmp_path):
    write_pooling(tmp_path, "mean_tokens", modules=None)
    assert declared_pooling(tmp_path).pooling == "mean"


def test_modules_without_a_pooling_module_declare_none(tmp_path):
    (tmp_path / "modules.json").write_text(json.dumps(MODULES[:1]))
    assert declared_pooling(tmp_path) is None


def test_the_flag_wins_and_a_different_choice_is_said(tmp_path):
    declared = declared_pooling(write_pooling(tmp_path, "mean_tokens"))
    assert decide_pooling("mean", declared) == ("mean", None)
    pooling, note = decide_pooling("cls", declared, "m")
    assert pooling == "cls"
    assert note == (
        "pooling: cls (--pooling), although m's 1_Pooling/config.json declares mean_tokens pooling"
    )


@pytest.mark.parametrize(
    "modes", [("max_tokens",), ("mean_sqrt_len_tokens",), ("mean_tokens", "max_tokens"), ()]
)
def test_a_declared_pooling_bertfit_does_not_have_is_refused_until_pooling_chooses(tmp_path, modes):
    declared = declared_pooling(write_pooling(tmp_path, *modes))
    assert declared.pooling is None
    with pytest.raises(ConfigError, match="which bertfit does not have.*pass --pooling mean"):
        decide_pooling(None, declared, "m")
    assert decide_pooling("mean", declared, "m")[0] == "mean"


@pytest.mark.parametrize(
    "modules", ["[not json", json.dumps({"path": "1_Pooling"}), json.dumps([{"type": 3}, 1])]
)
def test_a_damaged_modules_json_names_the_file(tmp_path, modules):
    write_pooling(tmp_path, "mean_tokens")
    (tmp_path / "modules.json").write_text(modules)
    with pytest.raises(CheckpointError, match=r"modules\.json: expected"):
        declared_pooling(tmp_path)
