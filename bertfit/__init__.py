"""bertfit: fine-tune BERT-family encoders for text classification on TPU, GPU or CPU.

The public API:

    encoder, tokenizer = bertfit.load_encoder("minilm-l6")
    outputs = encoder(tokenizer(["a gripping film"], max_seq_length=32))

    run = bertfit.train(bertfit.RunConfig(...))        # same as `bertfit train`
    metrics = bertfit.evaluate(run_dir, data_file)     # same as `bertfit evaluate`
"""

from bertfit.checkpoints.load import load_encoder
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.errors import BertfitError
from bertfit.model.classifier import BertClassifier
from bertfit.model.config import BertConfig
from bertfit.model.encoder import BertEncoder
from bertfit.text.tokenizer import BertTokenizer

__version__ = "0.1.0"

__all__ = [
    "BertClassifier", "BertConfig", "BertEncoder", "BertTokenizer", "BertfitError", "DataConfig",
    "ModelConfig", "RunConfig", "TrainConfig", "load_encoder",
]
