"""Two MultiWorkerMirroredStrategy workers on 127.0.0.1 train like one process."""

import numpy as np
import pytest

from tests.distributed import cluster

pytestmark = pytest.mark.distributed


def test_two_workers_match_one_process_use_each_example_once_and_only_the_chief_writes(
    tmp_path, trainable_hf_dir, shards, reference
):
    runs = [tmp_path / f"worker{i}" for i in range(2)]
    temporary = [tmp_path / f"tmp{i}" for i in range(2)]
    for directory in temporary:
        directory.mkdir()
    with cluster.reserved_ports(2) as ports:  # held until both workers are done
        workers = ",".join(f"127.0.0.1:{port}" for port in ports)
        processes = [
            cluster.start(
                cluster.train_args(
                    trainable_hf_dir,
                    shards,
                    runs[i],
                    "--workers",
                    workers,
                    "--worker-index",
                    str(i),
                ),
                indices_dir=tmp_path / f"indices{i}",
                temporary_dir=temporary[i],
            )
            for i in range(2)
        ]
        results = [cluster.finish(p) for p in processes]  # both finish

    chief, other = runs
    assert results[0]["run_dir"] == str(chief)
    assert "CollectiveAllReduceStrategy with 2 replicas" in (chief / "train.log").read_text()
    assert not other.exists(), "a non-chief worker wrote its run directory"
    assert results[1]["run_dir"] is None  # the non-chief's summary names no run directory
    assert list(temporary[1].glob("bertfit-worker-*")) == []  # its scratch run was removed
    np.testing.assert_allclose(
        cluster.step_losses(chief), cluster.step_losses(reference), rtol=1e-4
    )

    # Each worker's input pipeline fed only its half; together every example exactly once.
    fed = [cluster.fed_indices(tmp_path / f"indices{i}") for i in range(2)]
    assert all(0 < len(f) < 96 for f in fed)
    counts = np.bincount(np.concatenate(fed), minlength=96)
    assert counts.tolist() == [1] * 96
