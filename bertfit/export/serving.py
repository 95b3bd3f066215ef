"""`bertfit export`: a trained classifier as a TF Serving SavedModel, `OUT/<version>/`.

What is saved is the classifier's graph (`bertfit.inference.graph.ClassifierModule`: tokenizer,
model and label names, with its signatures `serving_default`, `classify_ids` and `classify` or
`regress`, the last two with TF Serving's classify/regress method names) and, in
`assets.extra/`, what `bertfit.load_classifier` needs to load it back. It loads with plain
`tf.saved_model.load` (plus `import tensorflow_text` for the tokenizer's ops), and in TensorFlow's
Session loader (C++ `LoadSavedModel`, what TF Serving runs; `bertfit.model.tracking` says why
that needs care): neither bertfit nor Keras is needed to use it.

    clf = bertfit.load_classifier("runs/sst")
    bertfit.export_classifier(clf, "exported/sst")       # exported/sst/1/
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import tensorflow as tf

from bertfit import storage
from bertfit.errors import ConfigError
from bertfit.export.portable import write_export
from bertfit.inference.graph import (
    CLASSIFY_SIGNATURE,
    METADATA_FILE,
    REGRESS_SIGNATURE,
)
from bertfit.inference.predictor import Classifier


def export_classifier(classifier: Classifier, root: str | Path, version: int | None = None) -> Path:
    """Writes `classifier` (a run's or an export's) as a TF Serving SavedModel:
    `root/<version>/` (the next free version by default); returns that folder."""
    metadata = {k: v for k, v in classifier.metadata.items() if k != "version"}
    return save_module(classifier.module, root, metadata, version, classifier.signatures())


def save_module(
    module,
    root: str | Path,
    metadata: dict,
    version: int | None = None,
    signatures: dict | None = None,
) -> Path | str:
    """Saves `module` (a `ClassifierModule`, or one loaded from an export together with its
    `signatures`) as `root/<version>/` (the next free version by default), whole or not at
    all: it is written beside the final name and renamed into place. A `root` at a URL
    (gs://, s3://: `bertfit.storage`) gets it uploaded (`_save_module_to_url`)."""
    if storage.is_url(root):
        return _save_module_to_url(module, storage.path_text(root), metadata, version, signatures)

    def write(folder: Path) -> None:
        tf.saved_model.save(
            module, str(folder), signatures=signatures or module.serving_signatures()
        )
        _set_method_names(folder)
        (folder / METADATA_FILE).parent.mkdir(exist_ok=True)
        (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2))

    return write_export(root, version, write)


def _save_module_to_url(
    module, root: str, metadata: dict, version: int | None, signatures: dict | None
) -> str:
    """`save_module` into a local folder, then uploaded file by file with `saved_model.pb`
    last: a version folder without it (an upload killed half-way) is no SavedModel to TF
    Serving or bertfit, and is best deleted."""
    versions = {int(n.split("/")[0]) for n in storage.list_files(root) if n.split("/")[0].isdigit()}
    version = max(versions, default=0) + 1 if version is None else version
    final = storage.join(root, str(version))
    if version in versions:
        raise ConfigError(
            f"{final} exists already; pass another --version or leave it out for the next free one."
        )
    with tempfile.TemporaryDirectory(prefix="bertfit-export-") as local:
        saved = Path(save_module(module, local, metadata, version, signatures))
        files = sorted(p.relative_to(saved).as_posix() for p in saved.rglob("*") if p.is_file())
        for name in sorted(files, key=lambda name: name == "saved_model.pb"):
            storage.upload_file(saved / name, storage.join(final, name))
    return final


# TF Serving's Classify and Regress APIs take only signatures of these method names;
# `tf.saved_model.save` writes every signature as a predict one.
METHOD_NAMES = {
    CLASSIFY_SIGNATURE: "tensorflow/serving/classify",
    REGRESS_SIGNATURE: "tensorflow/serving/regress",
}


def _set_method_names(saved_model_dir: Path) -> None:
    """Gives the `classify` / `regress` signatures of the SavedModel TF Serving's method names."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = saved_model_dir / "saved_model.pb"
    saved = saved_model_pb2.SavedModel.FromString(path.read_bytes())
    for meta_graph in saved.meta_graphs:
        for name, method in METHOD_NAMES.items():
            if name in meta_graph.signature_def:
                meta_graph.signature_def[name].method_name = method
    path.write_bytes(saved.SerializeToString())
