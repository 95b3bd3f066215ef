"""`ServeOptions` owns `bertfit serve`'s options: the CLI's flags are its fields (help, units,
defaults), `ModelServer` and `serve` take it, and a value no server can work with is refused by
building it, naming the flag, before any model loads."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from bertfit.cli import build_parser
from bertfit.errors import ConfigError
from bertfit.flags import flags_of, given
from bertfit.serve.options import FLAGS, ServeOptions


def _serve_options(*argv) -> ServeOptions:
    args = build_parser().parse_args(["serve", "--run", "r", *argv])
    return ServeOptions(**given(args, flags_of(ServeOptions)))


def test_every_field_is_a_serve_flag_with_its_help_and_no_default_of_its_own():
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    actions = {a.option_strings[0]: a for a in sub.choices["serve"]._actions if a.option_strings}
    for field in dataclasses.fields(ServeOptions):
        action = actions[FLAGS[field.name].name]
        assert action.help == FLAGS[field.name].help_text()
        assert action.default is argparse.SUPPRESS
    assert actions["--max-batch"].help.endswith(f"(default {ServeOptions.max_batch})")
    assert "(default 16 MiB)" in actions["--max-request-bytes"].help
    assert "default 30000)" in actions["--rest-api-timeout-in-ms"].help  # 30 s in ms


def test_flags_left_out_are_the_options_defaults_and_given_ones_their_units():
    assert _serve_options() == ServeOptions()
    options = _serve_options(
        "--max-wait-ms", "50", "--rest-api-timeout-in-ms", "2500", "--max-request-bytes", "1000"
    )
    assert (options.max_wait, options.rest_timeout, options.max_body_bytes) == (0.05, 2.5, 1000)
    assert _serve_options("--version-labels", "stable=1,canary=2").version_labels == {
        "stable": 1,
        "canary": 2,
    }


def test_the_grpc_port_is_tf_servings_or_any_free_one_beside_any_free_rest_port():
    assert ServeOptions().grpc_port_to_bind() == 8500
    assert ServeOptions(port=0).grpc_port_to_bind() == 0
    assert ServeOptions(port=0, grpc_port=-1).grpc_port_to_bind() == -1


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"max_batch": 0}, "--max-batch must be at least 1, got 0"),
        ({"batch_threads": 0}, "--batch-threads must be at least 1, got 0"),
        ({"max_body_bytes": 0}, "--max-request-bytes must be at least 1, got 0"),
        ({"max_wait": float("nan")}, "--max-wait-ms must be 0 or more"),
        ({"grpc_port": 70000}, "--grpc-port 70000 is not a TCP port"),
        ({"model_name": "a/b"}, "--model-name 'a/b' cannot be routed"),
    ],
)
def test_options_no_server_can_work_with_are_refused_naming_the_flag(settings, message):
    with pytest.raises(ConfigError, match=message):
        ServeOptions(**settings)
    with pytest.raises(ConfigError, match=message):
        ServeOptions().replace(**settings)


def test_the_python_api_serves_with_the_same_defaults(pair_classifier):
    from bertfit.serve.app import ModelServer

    classifier, _ = pair_classifier
    server = ModelServer(classifier)
    defaults = ServeOptions()
    assert server.options == defaults
    assert (server.batcher.max_batch, server.batcher.max_wait) == (
        defaults.max_batch,
        defaults.max_wait,
    )
    assert server.batcher.batches_at_once == defaults.batch_threads == 2
    assert server.core.max_request_instances == defaults.max_request_instances
    assert server.core.max_queued_requests == defaults.max_queued_requests
    changed = ModelServer(
        classifier, "pair", options=ServeOptions(max_batch=8), max_wait=0.02, batch_threads=1
    )
    batcher = changed.batcher
    assert (changed.model_name, batcher.max_batch, batcher.max_wait, batcher.batches_at_once) == (
        "pair",
        8,
        0.02,
        1,
    )
    with pytest.raises(ConfigError, match="--max-queued-requests must be at least 1"):
        ModelServer(classifier, max_queued_requests=0)
