"""bertfit: fine-tune BERT-family encoders for text classification on TPU, GPU or CPU.

The public API (imported on first use, so `import bertfit` does not load TensorFlow):

    encoder, tokenizer = bertfit.load_encoder("minilm-l6")
    outputs = encoder(tokenizer(["a gripping film"], max_seq_length=32))

    config = bertfit.RunConfig(data=bertfit.DataConfig(train="train.csv", eval="dev.csv"))
    report = bertfit.check(config)                          # `bertfit check`: findings, no training
    summary = bertfit.train(config)                         # `bertfit train`: a RunSummary
    bertfit.write_report(summary.run_dir)                   # report.html, as `bertfit train` does
    metrics = bertfit.evaluate("runs/latest", "test.csv")   # `bertfit evaluate`
    rows = bertfit.predict("runs/latest", "new.csv")        # `bertfit predict`: one dict a row

    classifier = bertfit.load_classifier("runs/latest")     # a run or an export, in memory
    rows = classifier.predict(["a gripping film"])
    bertfit.export_classifier(classifier, "exported/sst")   # `bertfit export`: TF Serving's layout
"""

import importlib

from bertfit.tf_startup import quiet_native_logs_by_default as _quiet_native_logs

__version__ = "0.1.0"

# Before any module of bertfit can load TensorFlow, whose C++ notes read like failures.
_quiet_native_logs()

# public name -> the module that defines it (a module itself where the name is the module)
_EXPORTS = {
    "BertClassifier": "bertfit.model.classifier",
    "BertConfig": "bertfit.model.config",
    "BertEncoder": "bertfit.model.encoder",
    "BertPreprocessor": "bertfit.text.preprocessor",
    "BertTokenizer": "bertfit.text.tokenizer",
    "BertfitError": "bertfit.errors",
    "ByteLevelBPETokenizer": "bertfit.text.bpe",
    "Classifier": "bertfit.inference.predictor",
    "DataConfig": "bertfit.config",
    "ModelConfig": "bertfit.config",
    "ReplicaJitModel": "bertfit.model.replica_jit",
    "RunConfig": "bertfit.config",
    "SentencePieceTokenizer": "bertfit.text.sentencepiece",
    "Task": "bertfit.data.tasks",
    "TrainConfig": "bertfit.config",
    "check": "bertfit.checks.api",
    "evaluate": "bertfit.inference.run",
    "export_classifier": "bertfit.export.serving",
    "load_classifier": "bertfit.inference.predictor",
    "load_encoder": "bertfit.checkpoints.load",
    "load_tokenizer": "bertfit.text.loading",
    "losses": "bertfit.model.losses",
    "make_dataset": "bertfit.data.dataset",
    "metrics": "bertfit.runs.metrics",
    "predict": "bertfit.inference.run",
    "train": "bertfit.training.run",
    "write_report": "bertfit.report",
}
_MODULES = {"losses", "metrics"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertfit' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    value = module if name in _MODULES else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
