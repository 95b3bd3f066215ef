from types import SimpleNamespace

import tensorflow as tf

from bertfit.training.xla import XlaChoice


def _strategy(device: str, replicas: int):
    devices = [f"/job:localhost/replica:0/task:0/device:{device}:{i}" for i in range(replicas)]
    return SimpleNamespace(
        num_replicas_in_sync=replicas, extended=SimpleNamespace(worker_devices=devices)
    )


def test_auto_on_a_cpu_compiles_nothing():
    choice = XlaChoice.for_run(None, tf.distribute.get_strategy())
    assert (choice.replica_step, choice.update) == (False, False)
    assert choice.describe() == "XLA for nothing (auto: CPU)"


def test_auto_on_accelerators_compiles_the_step_and_the_update_only_on_one_device():
    assert XlaChoice.for_run(None, _strategy("GPU", 1)) == XlaChoice(True, True, "auto: GPU")
    assert XlaChoice.for_run(None, _strategy("TPU", 8)) == XlaChoice(True, False, "auto: TPU")


def test_an_explicit_choice_wins():
    on = XlaChoice.for_run(True, _strategy("CPU", 1))
    assert on.describe() == "XLA for forward/backward and update (--jit-compile True)"
    off = XlaChoice.for_run(False, _strategy("GPU", 1))
    assert (off.replica_step, off.update) == (False, False)
    assert off.describe() == "XLA for nothing (--jit-compile False)"
