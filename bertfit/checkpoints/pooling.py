"""The pooling a checkpoint was trained with, and the run's pooling when `--pooling` is not given.

A sentence-transformers model (all-MiniLM-L6-v2, the packaged `minilm-l6`) is trained through
its own pooling module, usually the mean of the token vectors; the BERT pooler it keeps (the
dense layer on [CLS]) is never trained on that objective. Pooling with it starts from a layer
the checkpoint's authors did not use: on MiniLM with 2,000 rows and 1 epoch, dev accuracy was
0.574 with 499 of 500 rows predicted one class, against 0.746 with the mean (issue 56). The
checkpoint says which pooling it was trained with: `modules.json` names its Pooling module's
folder, whose `config.json` (usually `1_Pooling/config.json`) sets one `pooling_mode_*` flag.

`decide_pooling` makes that the run's pooling when `--pooling` is not given (None), says so in
a note, and refuses a declared pooling bertfit does not have (max, weighted mean, ...) rather
than guessing; the run's config.yaml then records the choice, which every later reader uses.

Examples:
>>> decide_pooling(None, DeclaredPooling(("mean_tokens",), "1_Pooling/config.json"))[0]
'mean'
>>> decide_pooling(None, None)
('cls', None)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path, PurePosixPath

from bertfit.config import DEFAULT_POOLING, POOLINGS
from bertfit.errors import CheckpointError, ConfigError

MODULES_FILE = "modules.json"  # sentence-transformers' list of a model's modules
POOLING_MODULE = "sentence_transformers.models.Pooling"
POOLING_CONFIG = "1_Pooling/config.json"  # where the Pooling module's settings usually are
MODE_PREFIX = "pooling_mode_"
# sentence-transformers' pooling modes (its flags without the prefix) bertfit pools the same way
# with: the mean of the token vectors, and [CLS] (bertfit's cls puts its pooler on [CLS]).
BERTFIT_POOLING = {"mean_tokens": "mean", "cls_token": "cls"}


@dataclasses.dataclass(frozen=True)
class DeclaredPooling:
    """The pooling a checkpoint declares.

    Args:
        modes: the `pooling_mode_*` flags set, without the prefix ("mean_tokens", ...).
        file: where it says so, relative to the checkpoint ("1_Pooling/config.json").
    """

    modes: tuple[str, ...]
    file: str

    @property
    def pooling(self) -> str | None:
        """bertfit's pooling for it ("mean" or "cls"), None when bertfit has none (max, a
        weighted mean, several modes concatenated)."""
        return BERTFIT_POOLING.get(self.modes[0]) if len(self.modes) == 1 else None

    def describe(self) -> str:
        """ "mean_tokens", or "max_tokens + mean_tokens" for concatenated modes."""
        return " + ".join(self.modes) or "no"


def declared_pooling(folder: Path) -> DeclaredPooling | None:
    """What the sentence-transformers files in `folder` (a checkpoint's directory) declare, or
    None when there are none (any checkpoint that is not a sentence-transformers model). A
    damaged file is a `CheckpointError` naming it."""
    if not folder.is_dir():
        return None
    modules = folder / MODULES_FILE
    if modules.is_file():
        listed = _read_json(modules)
        if not isinstance(listed, list) or not all(isinstance(m, dict) for m in listed):
            raise _damaged(modules, "a list of modules, each with a type and a path")
        paths = [m.get("path") for m in listed if m.get("type") == POOLING_MODULE]
        if not paths:
            return None
        if not isinstance(paths[0], str):
            raise _damaged(modules, f"the {POOLING_MODULE} module's folder as its path")
        file = str(PurePosixPath(paths[0], "config.json"))
    elif (folder / POOLING_CONFIG).is_file():
        file = POOLING_CONFIG
    else:
        return None
    values = _read_json(folder / file)
    if not isinstance(values, dict):
        raise _damaged(folder / file, "a mapping of pooling_mode_* flags")
    modes = tuple(
        key.removeprefix(MODE_PREFIX)
        for key, value in values.items()
        if key.startswith(MODE_PREFIX) and value is True
    )
    return DeclaredPooling(modes, file)


def decide_pooling(
    given: str | None, declared: DeclaredPooling | None, where: str = "the checkpoint"
) -> tuple[str, str | None]:
    """The run's pooling and the note that says where it comes from: `given` (`--pooling`)
    when set, else what the checkpoint `declared`, else cls. A declared pooling bertfit does
    not have, with no `--pooling`, is a `ConfigError` naming the choice."""
    if declared is None:
        return given or DEFAULT_POOLING, None
    if given is not None:
        if given == declared.pooling:
            return given, None
        return given, (
            f"pooling: {given} (--pooling), although {where}'s {declared.file} declares "
            f"{declared.describe()} pooling"
        )
    if declared.pooling is None:
        raise ConfigError(
            f"{where}'s {declared.file} declares {declared.describe()} pooling, which bertfit "
            f"does not have (--pooling {' or '.join(POOLINGS)}: the pooler on [CLS], or the "
            "mean of the token vectors); choose one: pass --pooling mean or --pooling cls."
        )
    return declared.pooling, (
        f"pooling: {declared.pooling} (declared by {where}'s {declared.file}; --pooling "
        "overrides it)"
    )


def untrained_pooler(
    pooling: str, declared: DeclaredPooling | None, missing: list[str] = ()
) -> str | None:
    """Why a run that pools with the pooler on [CLS] (`pooling` "cls") starts from a pooler
    the checkpoint never trained, or None: the checkpoint declares another pooling, or has no
    pooler weights (`missing`: the names its load left as initialised)."""
    if pooling != "cls":
        return None
    if declared is not None and declared.pooling != "cls":
        return (
            f"the checkpoint's {declared.file} declares {declared.describe()} pooling, so its "
            "pooler on [CLS] was never trained"
        )
    if any("pooler" in name for name in missing):
        return "the checkpoint has no pooler weights, so the pooler on [CLS] started at random"
    return None


def _read_json(file: Path):
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _damaged(file, f"JSON ({e})") from None


def _damaged(file: Path, expected: str) -> CheckpointError:
    return CheckpointError(
        f"{file}: expected {expected}; the sentence-transformers file that says how the model "
        "pools is damaged. Restore it from where the checkpoint came from."
    )
