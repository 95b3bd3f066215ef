import pytest

from bertfit.errors import ConfigError
from bertfit.training.strategy import make_strategy, per_replica_batch


class Replicas:
    def __init__(self, n):
        self.num_replicas_in_sync = n


def test_batch_that_does_not_divide_over_replicas_states_the_arithmetic_and_the_fix():
    with pytest.raises(ConfigError, match=r"7 / 2 = 3\.50 examples per replica") as error:
        per_replica_batch(7, Replicas(2))
    assert "--batch-size 6 or 8" in str(error.value)


def test_per_replica_batch_divides():
    assert per_replica_batch(32, Replicas(4)) == 8


def test_auto_on_a_plain_cpu_is_the_default_strategy():
    assert make_strategy("auto").num_replicas_in_sync == 1


def test_tpu_strategy_without_a_tpu_explains_what_to_do():
    with pytest.raises(ConfigError, match="No TPU found"):
        make_strategy("tpu", tpu="no-such-tpu")
