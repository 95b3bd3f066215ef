"""`bertfit serve`'s options: a port, host or model name no client could reach is a one-line
error and exit 2, said before the model loads and before anything is announced."""

from __future__ import annotations

import socket

import pytest

from bertfit.cli import main


def _serve(capsys, *flags) -> tuple[int, str, str]:
    code = main(["serve", "--run", "no-such-run", *flags])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_outside_0_to_65535_is_refused(capsys, port):
    code, out, err = _serve(capsys, "--port", port)
    assert code == 2 and out == ""
    assert err.strip() == (
        f"bertfit serve: error: --port {port} is not a TCP port; use one from 1 to 65535 "
        "(e.g. 8501), or 0 for any free port"
    )


def test_a_busy_port_is_said_before_anything_is_announced(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = _serve(capsys, "--port", str(port))
    assert code == 2 and "serving" not in out and out == ""
    assert f"port {port} is in use on 127.0.0.1" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", ["a:b", "a/b", "", "a b", "what?", "a#b", "50%", "tab\t"])
def test_a_model_name_tf_serving_urls_cannot_route_is_refused(capsys, name):
    code, out, err = _serve(capsys, "--model-name", name)
    assert code == 2 and out == ""
    assert f"--model-name {name!r} cannot be routed in TF Serving's URLs" in err


def test_an_unknown_host_is_refused(capsys):
    code, _, err = _serve(capsys, "--host", "no-such-host.invalid", "--port", "8501")
    assert code == 2 and "--host 'no-such-host.invalid' is not a host name or address" in err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max-batch", "0"], "--max-batch must be at least 1, got 0"),
        (["--max-request-instances", "-3"], "--max-request-instances must be at least 1"),
        (["--max-wait-ms", "-1"], "--max-wait-ms must be 0 or more"),
        (["--max-wait-ms", "nan"], "--max-wait-ms must be 0 or more"),
        (["--max-request-bytes", "0"], "--max-request-bytes must be at least 1, got 0"),
        (["--max-queued-requests", "0"], "--max-queued-requests must be at least 1, got 0"),
        (["--read-timeout-seconds", "0"], "--read-timeout-seconds must be more than 0"),
        (["--rest-api-timeout-in-ms", "-5"], "--rest-api-timeout-in-ms must be more than 0"),
        (["--version-policy", "newest"], "--version-policy 'newest' is not a version policy"),
        (["--file-system-poll-wait-seconds", "-1"], "--file-system-poll-wait-seconds must be 0"),
    ],
)
def test_batching_options_that_cannot_work_are_refused(capsys, flags, message):
    code, _, err = _serve(capsys, *flags)
    assert code == 2 and message in err


def test_good_options_reach_loading_the_model(capsys):
    # Everything checked passes, so the next thing said is about the run itself. Port 0: any
    # free one, so nothing else can hold it.
    code, _, err = _serve(capsys, "--port", "0", "--model-name", "sst-2_v1.0")
    assert code == 2 and "no-such-run: no such run directory or export" in err
