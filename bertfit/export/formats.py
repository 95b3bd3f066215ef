"""`bertfit export --format`: which function writes each format."""

from __future__ import annotations

from collections.abc import Callable

from bertfit.errors import ConfigError

FORMATS = ("saved-model", "litert", "onnx", "hf")


def exporter(format_name: str) -> Callable:
    """The function that writes `format_name`: `export(classifier, root, version=None,
    quantize=None) -> root/<version>`; a saved-model export takes no `quantize`, an hf export
    (`root` itself, for transformers) neither `version` nor `quantize`."""
    if format_name == "saved-model":
        from bertfit.export.serving import export_classifier

        return export_classifier
    if format_name == "litert":
        from bertfit.export.litert import export_litert

        return export_litert
    if format_name == "onnx":
        from bertfit.export.onnx import export_onnx

        return export_onnx
    if format_name == "hf":
        from bertfit.export.hf import export_hf

        return export_hf
    raise ConfigError(f"--format {format_name!r}: expected one of {FORMATS}.")
