"""bertfit: fine-tune BERT-family encoders for text classification on TPU, GPU or CPU.

The public API:

    encoder, tokenizer = bertfit.load_encoder("minilm-l6")
    outputs = encoder(tokenizer(["a gripping film"], max_seq_length=32))

    run = bertfit.train(bertfit.RunConfig(...))        # same as `bertfit train`
    metrics = bertfit.evaluate(run_dir, data_file)     # same as `bertfit evaluate`
"""

import os

# TensorFlow's C++ start-up chatter (oneDNN, CUDA probing) is noise for a CLI user.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bertfit import check  # noqa: E402  (callable: bertfit.check(config) runs the checks)
from bertfit.checkpoints.load import load_encoder  # noqa: E402
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig  # noqa: E402
from bertfit.data.dataset import make_dataset  # noqa: E402
from bertfit.data.tasks import Task  # noqa: E402
from bertfit.errors import BertfitError  # noqa: E402
from bertfit.model.classifier import BertClassifier  # noqa: E402
from bertfit.model.config import BertConfig  # noqa: E402
from bertfit.model.encoder import BertEncoder  # noqa: E402
from bertfit.model.replica_jit import ReplicaJitModel  # noqa: E402
from bertfit.predictor import Classifier, load_classifier  # noqa: E402
from bertfit.text.tokenizer import BertTokenizer  # noqa: E402
from bertfit.train import losses, metrics  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "BertClassifier", "BertConfig", "BertEncoder", "BertTokenizer", "BertfitError", "Classifier",
    "DataConfig", "ModelConfig", "ReplicaJitModel", "RunConfig", "Task", "TrainConfig", "check",
    "load_classifier", "load_encoder", "losses", "make_dataset", "metrics",
]
