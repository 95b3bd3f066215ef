import pytest

from bertfit.errors import ConfigError
from bertfit.training.strategy import make_strategy


def test_auto_on_a_plain_cpu_is_the_default_strategy():
    assert make_strategy("auto").num_replicas_in_sync == 1


def test_tpu_strategy_without_a_tpu_explains_what_to_do():
    with pytest.raises(ConfigError, match="No TPU found"):
        make_strategy("tpu", tpu="no-such-tpu")
