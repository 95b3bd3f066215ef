"""`bertfit convert` writes its output whole or not at all: a refused or failed conversion
leaves nothing behind that would block the rerun."""

from __future__ import annotations

import pytest

import bertfit.checkpoints.convert as convert_module
from bertfit.cli import main


@pytest.mark.parametrize("length", ["0", "-5", "7"])
def test_a_seq_length_below_8_is_refused_before_anything_is_written(
    tiny_hf_dir, tmp_path, capsys, length
):
    model, _ = tiny_hf_dir
    out = tmp_path / "hub"
    assert main(["convert", str(model), str(out), "--to", "tf-hub", "--seq-length", length]) == 2
    err = capsys.readouterr().err
    assert f"--seq-length {length}: " in err and "use at least 8" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_a_conversion_that_fails_half_way_leaves_nothing_and_the_rerun_works(
    tiny_hf_dir, tmp_path, monkeypatch, capsys
):
    model, _ = tiny_hf_dir
    out = tmp_path / "hf"
    written = convert_module.write_hf

    def fails_after_a_file(encoder, head, destination, **kwargs):
        destination.mkdir(parents=True)
        (destination / "config.json").write_text("{}")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(convert_module, "write_hf", fails_after_a_file)
    assert main(["convert", str(model), str(out), "--to", "hf"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no half-written DST, no temporary folder

    monkeypatch.setattr(convert_module, "write_hf", written)
    assert main(["convert", str(model), str(out), "--to", "hf"]) == 0
    assert f"wrote hf: {out}" in capsys.readouterr().out
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
