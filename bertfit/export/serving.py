"""`bertfit export`: a trained classifier as a TF Serving SavedModel, `OUT/<version>/`.

What is saved is the classifier's graph (`bertfit.inference.graph.ClassifierModule`: tokenizer,
model and label names, with its signatures `serving_default` and `classify_ids`) and, in
`assets.extra/`, what `bertfit.load_classifier` needs to load it back. It loads with plain
`tf.saved_model.load` (plus `import tensorflow_text` for the tokenizer's ops): neither bertfit nor
Keras is needed to use it.

    clf = bertfit.load_classifier("runs/sst")
    bertfit.export_classifier(clf, "exported/sst")       # exported/sst/1/
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import tensorflow as tf

from bertfit.errors import ConfigError
from bertfit.inference.graph import METADATA_FILE, next_version
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
) -> Path:
    """Saves `module` (a `ClassifierModule`, or one loaded from an export together with its
    `signatures`) as `root/<version>/` (the next free version by default), whole or not at
    all: it is written beside the final name and renamed into place."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is a file; pass a folder for the exported versions.")
    version = next_version(root) if version is None else version
    final = root / str(version)
    if final.exists():
        raise ConfigError(
            f"{final} exists already; pass another --version or leave it out for the next free one."
        )
    root.mkdir(parents=True, exist_ok=True)
    temporary = root / f".{version}.tmp-{os.getpid()}"
    try:
        tf.saved_model.save(
            module, str(temporary), signatures=signatures or module.serving_signatures()
        )
        (temporary / METADATA_FILE).parent.mkdir(exist_ok=True)
        (temporary / METADATA_FILE).write_text(json.dumps(metadata, indent=2))
        os.replace(temporary, final)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return final
