"""The teacher on the student's Keras backend (`load_teacher`): its classifier labels the
student's rows, its fine-tuned encoder is what a student is cut from (`bertfit.distill.student`)
and its tokenizer gives the ids a pruned vocabulary keeps. On JAX none of them needs
TensorFlow: the run's model on the JAX devices (`JaxClassifier`) and its tokenizer on the host
(`HostTokenizer`), whose ids are the in-graph tokenizer's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bertfit.inference.backends import inference_backend
from bertfit.inference.texts import TextClassifier


@dataclasses.dataclass(frozen=True)
class Teacher:
    """A finished run as a teacher.

    Args:
        classifier: its best checkpoint's classifier (`labels`, `pairs`, `predict_proba`).
        encoder: the fine-tuned encoder inside that classifier's model.
        tokenizer: its tokenizer (`tokenize_all`, `special_token_ids`).
    """

    classifier: TextClassifier
    encoder: object
    tokenizer: object


def load_teacher(path: str | Path, backend: str) -> Teacher:
    """The run in `path` as a teacher on Keras' `backend` ("tensorflow" or "jax"), the one
    this process's Keras runs on."""
    classifier = inference_backend(backend).run_classifier(path)
    holder = getattr(classifier, "module", classifier)  # TensorFlow's keeps them in its module
    model = holder.model
    encoder = getattr(model, "classifier", model).encoder  # a ChunkedClassifier wraps one
    return Teacher(classifier, encoder, holder.tokenizer)
