"""`bertfit train --backend jax`: the same run on Keras' JAX backend (`training/jax_trainer.py`).

Keras picks its backend once per process, so every JAX run here is a process of its own; this
one is TensorFlow's, and evaluates, predicts and exports the JAX-trained runs as every
TensorFlow process does. The evidence: the same weights and batches give the same 50 losses on
both backends, on one JAX device and split over two (the CPU rehearses them with XLA_FLAGS),
the JAX run's evaluation is TensorFlow's, its export predicts what bertfit predicts, and a JAX
run killed with SIGKILL resumes to exactly the uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertfit.cli import main
from bertfit.config import RunConfig, TrainConfig, config_differences
from bertfit.errors import ConfigError
from bertfit.inference.predictor import load_classifier
from bertfit.jax_devices import ONEDNN_DOTS, ONEDNN_SWITCH
from bertfit.tf_startup import select_keras_backend
from bertfit.training.backends import backend_of
from bertfit.training.jax_trainer import COMPILATION_CACHE
from tests.distributed import cluster
from tests.inference.jax_outputs import TIMINGS, assert_same_as_tensorflow, calibrated_copy
from tests.jax_process import run_in_jax, xla_flags_for_two_devices
from tests.tiny import sentiment_rows, write_csv
from tests.training import backend_cases, backend_steps
from tests.training.kill import resume_args, run_killed, run_train, steps_of


def _jax(config: RunConfig = None, **train) -> RunConfig:
    config = config or RunConfig()
    return dataclasses.replace(
        config, train=dataclasses.replace(config.train, backend="jax", **train)
    )


def _check(config: RunConfig, distilling: bool = False) -> None:
    """What `train` refuses before anything is written, by the config's backend."""
    backend_of(config).check(config, distilling)


@pytest.mark.parametrize(
    "train, flag",
    [
        ({"strategy": "mirrored"}, "--strategy mirrored"),
        ({"tpu": "local"}, "--tpu"),
        ({"cpu_replicas": 2}, "--cpu-replicas"),
        ({"jit_compile": False}, "--jit-compile false"),
    ],
)
def test_jax_refuses_what_it_does_not_run_naming_the_flag(train, flag):
    with pytest.raises(ConfigError, match=flag):
        _check(_jax(**train))


def test_jax_refuses_float16_and_a_multi_host_distillation(monkeypatch):
    config = _jax()
    fp16 = dataclasses.replace(
        config, model=dataclasses.replace(config.model, precision="mixed_fp16")
    )
    with pytest.raises(ConfigError, match="--precision mixed_fp16"):
        _check(fp16)
    # one process distils (refused only as any JAX run is here, where Keras runs on TensorFlow)
    with pytest.raises(ConfigError, match="Keras runs on tensorflow in this process"):
        _check(config, distilling=True)
    monkeypatch.setenv("BERTFIT_JAX_DISTRIBUTED", "auto")
    with pytest.raises(ConfigError, match="bertfit distill --backend jax runs in one process"):
        _check(config, distilling=True)
    _check(RunConfig(), distilling=True)  # on TensorFlow, as this process


def test_a_backend_keras_does_not_run_in_this_process_is_refused():
    with pytest.raises(ConfigError, match="Keras runs on tensorflow in this process"):
        _check(_jax())
    with pytest.raises(ConfigError, match="set KERAS_BACKEND=jax before Keras is imported"):
        select_keras_backend("jax")
    _check(RunConfig(train=TrainConfig()))  # the default: TensorFlow, as this process


@pytest.mark.slow
def test_50_steps_give_the_same_losses_on_both_backends_one_or_two_jax_devices(
    trainable_hf_dir, tmp_path
):
    """TensorFlow's one device is the reference twice: for JAX on one device, and for JAX on
    two devices with gradient accumulation (2 micro-batches per step; on TensorFlow too)."""
    train = write_csv(tmp_path / "train.csv", sentiment_rows(800, seed=11))
    initial = tmp_path / "initial"  # the first run writes its initial weights, the others read
    for devices, grad_accum in ((1, 1), (2, 2)):
        config = backend_steps.run_config(trainable_hf_dir, train, grad_accum)
        tensorflow = backend_steps.take_steps(config, initial)
        out = tmp_path / f"jax{devices}.npz"
        args = ["tests.training.backend_steps", trainable_hf_dir, train, initial, out, grad_accum]
        run_in_jax(args, devices=devices)
        jax = np.load(out)

        assert len(jax["loss"]) == len(tensorflow["loss"]) == backend_steps.STEPS
        np.testing.assert_allclose(jax["loss"], tensorflow["loss"], atol=1e-4)
        np.testing.assert_allclose(jax["grad_norm"], tensorflow["grad_norm"], atol=1e-4)
        weights = [k for k in tensorflow if k.startswith("weight:")]
        assert len(weights) > 10
        for name in weights:
            np.testing.assert_allclose(jax[name], tensorflow[name], atol=1e-4, err_msg=name)
        # one compilation per bucket (8 and 16), none after
        assert json.loads(str(jax["trace_counts"]))["train_step"] == 2


@pytest.mark.slow  # a JAX process: three runs' steps, one compilation each (~50 s in all)
def test_every_pooling_task_and_head_takes_tensorflows_steps_on_jax(trainable_hf_dir, tmp_path):
    """The kinds of run the TensorFlow tests train (`backend_cases.CASES`: mean pooling, whose
    unused pooler is frozen; regression on documents chunked into windows pooled by
    attention; multi-label on the [CLS] pooler with LoRA on an int8 base in mixed_bf16) take
    three steps, one per host call, from the same weights on both backends: the same losses
    and gradient norms (bfloat16's products round differently on each)."""
    backend_cases.write_data(tmp_path)
    backend_cases.take_all(trainable_hf_dir, tmp_path)  # TensorFlow first: the initial weights
    run_in_jax(["tests.training.backend_cases", trainable_hf_dir, tmp_path])
    for case, (_, model, _) in backend_cases.CASES.items():
        tensorflow, jax = (
            np.load(backend_cases.out_file(tmp_path, case, backend))
            for backend in ("tensorflow", "jax")
        )
        assert len(jax["loss"]) == len(tensorflow["loss"]) == 3, case
        bfloat16 = model.get("precision") == "mixed_bf16"
        atol, rtol = (5e-3, 1e-2) if bfloat16 else (1e-4, 1e-4)
        np.testing.assert_allclose(jax["loss"], tensorflow["loss"], atol=atol, err_msg=case)
        np.testing.assert_allclose(
            jax["grad_norm"], tensorflow["grad_norm"], rtol=rtol, err_msg=case
        )
        assert json.loads(str(jax["trace_counts"]))["train_step"] == 1, case  # one bucket


def test_a_cpu_step_hands_its_products_to_onednn_and_trains_as_xlas_own_kernels():
    """On an x86 CPU `JaxTrainer` compiles with `compiler_options`: XLA:CPU calls oneDNN for
    every matrix product (TensorFlow's CPU library; 0.91-0.96x the step time), and three steps
    give the weights XLA's own kernels give, within float32 rounding."""
    out = json.loads(run_in_jax(["tests.training.jax_dots"]))
    if platform.machine().lower() not in ("x86_64", "amd64"):
        assert out["options"] is None and out["onednn_calls"] == 0
        return
    assert out["options"] == ONEDNN_DOTS
    assert out["onednn_calls"] > 0 and out["plain_onednn_calls"] == 0
    assert out["loss_diff"] < 1e-6 and out["weight_diff"] < 1e-6
    assert len(set(out["losses"])) == 3  # the steps trained
    assert out["switched_off"] is None  # BERTFIT_JAX_ONEDNN=0: XLA's own kernels, cacheable


def _two_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JAX processes started from here see two CPU devices."""
    monkeypatch.setenv("XLA_FLAGS", xla_flags_for_two_devices())


def _cache_of(run) -> Path:
    return run.parent / "cache"


def _cache_in(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """The JAX processes started from here keep their compiled steps in `cache`, however
    quickly they compile (the tiny model's in less than the second JAX caches from)."""
    monkeypatch.setenv("BERTFIT_CACHE", str(cache))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    # XLA's own kernels: JAX cannot write a step that calls oneDNN to its cache
    monkeypatch.setenv(ONEDNN_SWITCH, "0")


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory, trainable_hf_dir):
    """A two-epoch JAX run from the CLI, data parallel over two devices, with dropout on and a
    checkpoint every 3 steps; its compiled steps cached in `_cache_of(run)`."""
    data = tmp_path_factory.mktemp("jax_data")
    train = write_csv(data / "train.csv", sentiment_rows(64, seed=11))
    dev = write_csv(data / "dev.csv", sentiment_rows(24, seed=12))
    args = resume_args(
        trainable_hf_dir, train, eval=dev, save_every_steps=3, jit_compile=None, backend="jax"
    )
    run = data / "run"
    with pytest.MonkeyPatch.context() as monkeypatch:
        _two_devices(monkeypatch)
        _cache_in(monkeypatch, _cache_of(run))
        code, err = run_train([*args, "--output-dir", str(run)])
    assert code == 0, err
    return args, run, dev


@pytest.mark.slow
def test_a_data_parallel_jax_run_records_its_backend_and_one_compile_per_bucket(jax_run):
    _, run, _ = jax_run
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert metrics["strategy"] == {"name": "jax DataParallel", "replicas": 2}
    assert metrics["trace_counts"] == {"train_step": 2, "predict_step": 2}  # buckets 8, 16
    assert "backend: jax" in (run / "config.yaml").read_text()


@pytest.mark.slow
def test_a_jax_run_evaluates_and_exports_in_tensorflow(jax_run, tmp_path, capsys, monkeypatch):
    _, run, dev = jax_run
    # exported for `train` on a TPU VM, it does not reach the TensorFlow commands
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    # TensorFlow's evaluation of the best weights is the one the JAX run made of them
    assert main(["evaluate", "--run", str(run), "--data", str(dev), "--json"]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert os.environ["KERAS_BACKEND"] == "tensorflow"
    metrics = json.loads((run / "metrics.json").read_text())
    best = next(e["eval"] for e in metrics["epochs"] if e["best"])
    assert evaluated["accuracy"] == best["accuracy"]
    assert evaluated["loss"] == pytest.approx(best["loss"], abs=1e-5)

    assert main(["export", "--run", str(run), str(tmp_path / "export")]) == 0
    texts = [text for text, _ in sentiment_rows(20, seed=9)] + ["", "good " * 40]
    serve = tf.saved_model.load(str(tmp_path / "export" / "1")).signatures["serving_default"]
    exported = serve(text=tf.constant(texts))["probabilities"].numpy()
    predicted = load_classifier(str(run)).predict(texts)
    expected = [[row["probabilities"][label] for label in ("neg", "pos")] for row in predicted]
    np.testing.assert_allclose(exported, expected, atol=1e-5)


@pytest.mark.slow  # a JAX process: 20 s on 2 busy cores (load 6)
def test_a_jax_run_evaluates_and_predicts_on_one_jax_device_as_in_tensorflow(jax_run, tmp_path):
    """`evaluate`/`predict --backend jax`, and the rows `bertfit predict --backend jax` writes
    (tests/inference/test_jax_inference.py has TensorFlow runs on two devices)."""
    run, dev = calibrated_copy(jax_run[1], tmp_path / "run"), str(jax_run[2])
    out = tmp_path / "jax.json"
    run_in_jax(["tests.inference.jax_outputs", "--cli", run, dev, out])
    jax = json.loads(out.read_text())

    assert jax["devices"] == 1
    assert jax["trace_counts"] == {"predict_step": 2}  # buckets 8 and 16, then no more
    assert_same_as_tensorflow(jax, run, dev)


@pytest.mark.slow
def test_a_killed_data_parallel_jax_run_resumes_from_the_cache_to_exactly_the_first_run(
    jax_run, tmp_path, monkeypatch
):
    """The first run compiled each bucket's steps into bertfit's cache (JAX's persistent
    compilation cache under `$BERTFIT_CACHE`); the same run again, killed and resumed in new
    processes, finds every one there (it adds no entry) and ends exactly as the first. The
    resumed process never imports TensorFlow, though it is installed (its start is ~3 s a JAX
    run does not use)."""
    args, plain, _ = jax_run
    compiled = sorted(p.name for p in (_cache_of(plain) / COMPILATION_CACHE).iterdir())
    killed = tmp_path / "killed"
    run_args = [*args, "--output-dir", str(killed)]
    # killed_train imports Keras before the CLI can choose its backend
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    _two_devices(monkeypatch)
    _cache_in(monkeypatch, _cache_of(plain))
    run_killed(run_args, ("steps", 5))  # mid-epoch 1, after the checkpoint at step 3
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # each import, one line on stderr
    code, err = run_train(run_args)
    assert code == 0, err
    assert "resuming the unfinished run" in err
    assert re.search(r"\| +keras$", err, re.M)
    assert not re.search(r"\| +tensorflow(\.\S+)?$", err, re.M)

    assert len(compiled) >= 4  # a train and a predict step per bucket (8, 16)
    assert sorted(p.name for p in (_cache_of(plain) / COMPILATION_CACHE).iterdir()) == compiled
    cluster.assert_same_weights(plain, killed, atol=1e-6)
    got, want = steps_of(killed), steps_of(plain)
    assert [s["global_step"] for s in got] == [s["global_step"] for s in want]
    np.testing.assert_array_equal([s["loss"] for s in got], [s["loss"] for s in want])


@pytest.mark.slow
def test_two_jax_processes_train_the_one_process_run_and_only_process_0_writes(
    jax_run, tmp_path, monkeypatch
):
    """Two processes of one device each (`jax.distributed` on localhost, gloo collectives on
    the CPU), each making only its half of every global batch's rows, train as one process's
    two devices do: the same losses, weights and evaluations. Process 1 is given its own
    --output-dir, and writes nothing there."""
    args, one_process, _ = jax_run
    runs = [tmp_path / "process0", tmp_path / "process1"]
    monkeypatch.delenv("XLA_FLAGS", raising=False)  # one CPU device per process
    with cluster.reserved_ports(1) as (port,):
        monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", f"127.0.0.1:{port}")
        monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
        processes = []
        for index, run in enumerate(runs):
            monkeypatch.setenv("JAX_PROCESS_ID", str(index))
            processes.append(cluster.start([*args, "--output-dir", str(run)]))
        summaries = [cluster.finish(p) for p in processes]

    assert summaries[0]["run_dir"] == str(runs[0])
    assert summaries[1]["run_dir"] is None and not runs[1].exists()
    metrics = json.loads((runs[0] / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert metrics["strategy"] == {"name": "jax DataParallel", "replicas": 2}
    np.testing.assert_allclose(
        cluster.step_losses(runs[0]), cluster.step_losses(one_process), atol=1e-6
    )
    cluster.assert_same_weights(one_process, runs[0], atol=1e-6)
    one = json.loads((one_process / "metrics.json").read_text())["epochs"]
    assert [_untimed(e["eval"]) for e in metrics["epochs"]] == [_untimed(e["eval"]) for e in one]


def _untimed(metrics: dict) -> dict:
    return {name: value for name, value in metrics.items() if name not in TIMINGS}


def test_the_backend_is_part_of_the_run_a_resume_continues():
    """Dropout draws other masks on each backend (and keeps its seeds in other dtypes): a run
    resumes on the backend it started on, which its config.yaml names."""
    assert config_differences(RunConfig(), _jax()) == ["train.backend: 'tensorflow' → 'jax'"]


def test_tune_from_python_on_tensorflow_refuses_jax_before_it_writes_the_sweep(tmp_path):
    """`bertfit tune --backend jax` sets Keras' backend (tests/sweeps/test_tune.py runs it);
    a sweep from Python in this TensorFlow process is refused before its directory is written,
    and so is what JAX does not run, naming the flag."""
    from bertfit.sweeps.spec import SweepSpec
    from bertfit.sweeps.tune import tune

    base = RunConfig(data=dataclasses.replace(RunConfig().data, train="t.csv", eval="e.csv"))
    with pytest.raises(ConfigError, match="`check`, `tune` and `audit` with --backend jax set it"):
        tune(_jax(base), SweepSpec({}, [42]), tmp_path / "sweep")
    with pytest.raises(ConfigError, match="--jit-compile false"):
        tune(_jax(base, jit_compile=False), SweepSpec({}, [42]), tmp_path / "sweep")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("command", ["tune", "audit"])
def test_tune_and_audit_make_backend_keras_backend_before_they_write(command, tmp_path, capsys):
    """Their preflight selects --backend as train's does: in this process, whose Keras runs on
    TensorFlow already, --backend jax is refused with the fix before the sweep is written."""
    import keras  # noqa: F401  (as any process that imported Keras before the command)

    train = write_csv(tmp_path / "train.csv", sentiment_rows(8, seed=1))
    sweep = tmp_path / "sweep"
    args = [command, "--model", "m", "--train", str(train), "--folds", "2"]
    assert main([*args, "--output-dir", str(sweep), "--backend", "jax"]) == 2
    assert "set KERAS_BACKEND=jax before Keras is imported" in capsys.readouterr().err
    assert not sweep.exists()


def test_check_of_a_jax_run_needs_keras_on_jax_and_names_what_jax_refuses():
    """`bertfit check --backend jax` selects Keras' backend first (its preflight, as train's);
    from Python, in a process whose Keras runs on TensorFlow, the check says how to run it.
    The JAX run itself is checked in tests/checks/test_jax_check.py."""
    from bertfit.checks.api import check

    config = _jax(RunConfig(data=dataclasses.replace(RunConfig().data, train="x.csv")))
    findings = check(config).findings
    assert [f.code for f in findings] == ["config-invalid"]
    assert "Keras runs on tensorflow in this process" in findings[0].message
    assert "`check`, `tune` and `audit` with --backend jax set it" in findings[0].message
    eager = dataclasses.replace(config, train=dataclasses.replace(config.train, jit_compile=False))
    assert "--jit-compile false" in check(eager).findings[0].message


@pytest.mark.slow
def test_doctor_compiles_each_bucket_of_a_jax_run_once_and_times_its_steps(jax_run):
    args, _, _ = jax_run
    # train's flags (--json among them) pasted; a given peak skips measuring the CPU's
    doctor = ["doctor", *args, "--steps", "4", "--peak-tflops", "1"]
    out = run_in_jax(["bertfit.cli", *doctor])
    report = json.loads(out.strip().splitlines()[-1])
    assert report["strategy"] == "jax OneDevice (keras.distribution)"
    assert report["devices"][0].startswith("cpu:0")
    assert report["buckets"] == [8, 16]
    assert report["compilations_at_warmup"] == 2  # one per bucket
    assert report["compilations_after_warmup"] == report["traces_after_warmup"] == 0
    assert report["step_seconds"] > 0 and report["peak_memory_bytes"] > 0
