"""The run directory: everything needed to evaluate, predict, resume or export a trained run.

    run/
      config.yaml           the resolved RunConfig (reload with --config)
      labels.json           label names by id
      encoder/              config.json, vocab.txt, tokenizer.json (the tokenizer's settings)
      checkpoints/latest/   model + optimizer + step + data position, each epoch
      checkpoints/best/     the best epoch by `best_metric`
      metrics.json          per epoch and final: loss, accuracy, macro_f1, num_examples, ...
      steps.jsonl           the training loss of every optimizer step
      train.log             what happened, readable
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import tensorflow as tf

from bertfit.config import RunConfig
from bertfit.data.labels import LabelMap
from bertfit.errors import BertfitError
from bertfit.model.config import BertConfig
from bertfit.text.tokenizer import BertTokenizer, TokenizerConfig


class RunDir:
    """Paths and readers/writers of one run directory.

    Args:
        path: the directory.
        write: whether this process writes files (False on non-chief workers).
    """

    def __init__(self, path: str | Path, write: bool = True):
        self.path = Path(path)
        self.write = write
        if write:
            self.path.mkdir(parents=True, exist_ok=True)

    # paths
    config_file = property(lambda self: self.path / "config.yaml")
    labels_file = property(lambda self: self.path / "labels.json")
    encoder_dir = property(lambda self: self.path / "encoder")
    metrics_file = property(lambda self: self.path / "metrics.json")
    log_file = property(lambda self: self.path / "train.log")
    steps_file = property(lambda self: self.path / "steps.jsonl")
    latest_dir = property(lambda self: self.path / "checkpoints" / "latest")
    best_dir = property(lambda self: self.path / "checkpoints" / "best")

    def log(self, message: str) -> None:
        if self.write:
            with self.log_file.open("a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")

    def save_setup(self, config: RunConfig, labels: LabelMap, bert: BertConfig,
                   tokenizer: BertTokenizer, vocab_file: Path) -> None:
        if not self.write:
            return
        config.save(self.config_file)
        labels.save(self.labels_file)
        self.encoder_dir.mkdir(exist_ok=True)
        (self.encoder_dir / "config.json").write_text(json.dumps(bert.to_dict(), indent=2))
        shutil.copyfile(vocab_file, self.encoder_dir / "vocab.txt")
        (self.encoder_dir / "tokenizer.json").write_text(
            json.dumps(dataclasses.asdict(tokenizer.config), indent=2))

    def save_step_losses(self, epoch: int, losses: list[float]) -> None:
        """One JSON line per optimizer step: the global-batch loss."""
        if self.write:
            with self.steps_file.open("a", encoding="utf-8") as f:
                for step, loss in enumerate(losses, 1):
                    f.write(json.dumps({"epoch": epoch, "step": step, "loss": loss}) + "\n")

    def save_metrics(self, metrics: dict) -> None:
        if self.write:
            self.metrics_file.write_text(json.dumps(metrics, indent=2))

    # readers
    def _require(self, file: Path) -> Path:
        if not file.exists():
            raise BertfitError(
                f"{self.path} is not a complete bertfit run directory: {file.name} is missing. "
                "Pass the --output-dir of a finished `bertfit train`.")
        return file

    def load_config(self) -> RunConfig:
        return RunConfig.load(self._require(self.config_file))

    def load_labels(self) -> LabelMap:
        return LabelMap.load(self._require(self.labels_file))

    def load_bert_config(self) -> BertConfig:
        return BertConfig.from_json_file(self._require(self.encoder_dir / "config.json"))

    def load_tokenizer(self) -> BertTokenizer:
        settings = json.loads(self._require(self.encoder_dir / "tokenizer.json").read_text())
        return BertTokenizer(self.encoder_dir / "vocab.txt",
                             **dataclasses.asdict(TokenizerConfig(**settings)))

    def checkpoint_path(self, which: str = "best") -> str:
        directory = self.best_dir if which == "best" else self.latest_dir
        path = tf.train.latest_checkpoint(str(directory))
        if path is None and which == "best":
            path = tf.train.latest_checkpoint(str(self.latest_dir))
        if path is None:
            raise BertfitError(f"{self.path}: no checkpoint found under {directory}.")
        return path
