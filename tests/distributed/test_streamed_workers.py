"""Two workers (subprocesses) train on a prepared TFRecord set: each reads only its own shard
files, both take the same steps, and every row is trained exactly once per epoch (issue 33)."""

from __future__ import annotations

import collections
import json
import subprocess

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.data.pipeline import PAD_INDEX
from bertfit.data.tfrecord import Manifest
from tests.distributed import cluster
from tests.tiny import sentiment_rows, write_csv

pytestmark = pytest.mark.distributed
ROWS = 61


def _start(args: list, indices_dir) -> subprocess.Popen:
    indices_dir.mkdir(parents=True)
    return cluster.python_module(
        ["tests.distributed.record_streamed", str(indices_dir), "train", *args]
    )


def test_two_workers_stream_their_own_files_and_train_every_row_once_per_epoch(
    tmp_path, trainable_hf_dir
):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(ROWS, seed=11))
    prepared = tmp_path / "prepared"
    args = ["prepare", str(train), str(prepared), "--model", str(trainable_hf_dir)]
    assert main([*args, "--max-seq-length", "16", "--shards", "3"]) == 0
    manifest = Manifest.load(prepared)

    runs = [tmp_path / f"worker{i}" for i in range(2)]
    with cluster.reserved_ports(2) as ports:
        workers = ",".join(f"127.0.0.1:{port}" for port in ports)
        processes = [
            _start(
                cluster.train_args(
                    trainable_hf_dir,
                    prepared,
                    runs[i],
                    "--workers",
                    workers,
                    "--worker-index",
                    str(i),
                    buckets="8,16",
                    epochs=2,
                ),
                tmp_path / f"rows{i}",
            )
            for i in range(2)
        ]
        results = [cluster.finish(p) for p in processes]  # neither hangs: equal step counts

    assert results[0]["run_dir"] == str(runs[0]) and not runs[1].exists()
    metrics = json.loads((runs[0] / "metrics.json").read_text())
    assert [e["train_examples"] for e in metrics["epochs"]] == [ROWS, ROWS]

    # worker i read shards i, i+2, ...: rows 0-20 and 41-60 on worker 0, 21-40 on worker 1
    first, second = (s.rows for s in manifest.shards[:2])
    own = [set(range(first)) | set(range(first + second, ROWS)), set(range(first, first + second))]
    for epoch in range(2):
        seen = collections.Counter()
        for worker in range(2):
            files = sorted((tmp_path / f"rows{worker}").glob(f"*-epoch{epoch}-*.npy"))
            rows = np.concatenate([np.load(f) for f in files])
            rows = rows[rows != PAD_INDEX]
            assert set(rows.tolist()) <= own[worker]
            seen.update(rows.tolist())
        assert seen == collections.Counter(range(ROWS)), f"epoch {epoch + 1}"
