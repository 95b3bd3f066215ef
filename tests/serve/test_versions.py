"""Model versions as TF Serving handles them: BASE polled for numbered versions, the version
policy (latest N, all, specific), TF Serving's states (START, LOADING, AVAILABLE, UNLOADING,
END), a version that fails to load reported and never replacing a working one, and
ModelService.HandleReloadConfigRequest / GetModelStatus through TF Serving's own stubs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import get_model_status_pb2, model_management_pb2

from bertfit.errors import ConfigError
from bertfit.export.serving import export_classifier
from bertfit.inference.predictor import load_classifier
from bertfit.serve.app import ModelServer, load_version
from bertfit.serve.core import NOT_FOUND, ServedVersion, ServingError, read_saved_model
from bertfit.serve.versions import VersionManager, VersionPolicy, load_status, version_folders
from tests.serve import prometheus_text
from tests.serve.conftest import lines_until, start_serve
from tests.serve.test_grpc import LiveServer


@pytest.mark.parametrize(
    "text, policy, aspired",
    [
        ("latest", VersionPolicy("latest", 1), {7}),
        ("latest:2", VersionPolicy("latest", 2), {3, 7}),
        ("all", VersionPolicy("all"), {1, 3, 7}),
        ("specific:3,1,9", VersionPolicy("specific", versions=(1, 3, 9)), {1, 3}),
    ],
)
def test_version_policies_choose_what_tf_serving_chooses(text, policy, aspired):
    assert VersionPolicy.parse(text) == policy
    assert policy.aspired([1, 7, 3]) == aspired
    assert VersionPolicy.parse(str(policy)) == policy


@pytest.mark.parametrize(
    "text", ["newest", "latest:0", "latest:x", "all:2", "specific:", "specific:a"]
)
def test_a_version_policy_that_is_none_is_refused(text):
    with pytest.raises(ConfigError, match="is not a version policy; use latest"):
        VersionPolicy.parse(text)


def test_every_numbered_folder_is_a_version_as_tf_servings_source_lists_it(tmp_path):
    for name in ["1", "2", "10", ".3.tmp-123", "4", "notes"]:
        (tmp_path / name).mkdir()
    for name in ["1", "10", ".3.tmp-123", "notes"]:
        (tmp_path / name / "saved_model.pb").write_bytes(b"")
    # "2" and "4" have no saved_model.pb: versions that will fail to load; the temporary
    # folder of an export in progress is no number.
    assert sorted(version_folders(tmp_path)) == [1, 2, 4, 10]


def test_a_version_ends_with_the_status_tensorflows_reader_gives_tf_serving(tmp_path):
    # 0.1 s: both fail as TensorFlow's reader does, before TensorFlow loads anything.
    (tmp_path / "1").mkdir()  # no saved_model.pb
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "saved_model.pb").write_bytes(b"not a SavedModel")
    server = ModelServer(None, "sst", versions=[])
    manager = VersionManager(server.core, tmp_path, VersionPolicy.parse("all"), load_version, 0)
    with pytest.raises(ConfigError, match=r"no version could be loaded \(version 1: Could not"):
        manager.load_initial()
    statuses = {
        s["version"]: (s["state"], *s["status"].values())
        for s in server.core.model_status("sst")["model_version_status"]
    }
    unparsed = f"Can't parse {tmp_path / '2' / 'saved_model.pb'} as binary proto"
    assert statuses.pop("2") == ("END", "DATA_LOSS", unparsed)
    assert statuses == {
        "1": (
            "END",
            "NOT_FOUND",
            "Could not find SavedModel .pb or .pbtxt at supplied export directory path: "
            f"{tmp_path / '1'}. Check that the directory exists and that you have the right "
            "permissions for accessing it.",
        )
    }


def test_a_load_error_from_tensorflow_keeps_its_code_others_are_unknown():
    error = tf.errors.InvalidArgumentError(None, None, "Op type not registered 'X'")
    assert load_status(error) == ("INVALID_ARGUMENT", "Op type not registered 'X'")
    assert load_status(tf.errors.DataLossError(None, None, "truncated")) == (
        "DATA_LOSS",
        "truncated",
    )
    assert load_status(FileNotFoundError("no labels.json")) == (
        "UNKNOWN",
        "FileNotFoundError: no labels.json",
    )


# ---- the manager on a ModelCore, with loads that take no TensorFlow time ----


@pytest.fixture(scope="module")
def classifier(trained_run):
    return load_classifier(trained_run[1].run_dir)


def _version(base: Path, number: int, broken: bool = False) -> None:
    """Version `number` in BASE as an export writes it: whole, renamed into place (its
    saved_model.pb an empty SavedModel, or bytes that do not parse)."""
    temporary = base / f".{number}.tmp-1"
    temporary.mkdir()
    (temporary / "saved_model.pb").write_bytes(b"not a SavedModel" if broken else b"")
    os.replace(temporary, base / str(number))


def _manager(
    base, classifier, policy="latest", max_wait=0.005
) -> tuple[ModelServer, VersionManager]:
    def load(number: int, folder: Path) -> ServedVersion:
        read_saved_model(folder)  # fails as the real loader does
        return ServedVersion(number, classifier, max_wait=max_wait)

    server = ModelServer(None, "sst", versions=[])
    return server, VersionManager(server.core, base, VersionPolicy.parse(policy), load, 0)


def _states(core) -> list[tuple[str, str, str]]:
    return [
        (s["version"], s["state"], s["status"]["error_code"])
        for s in core.model_status("sst")["model_version_status"]
    ]


@pytest.mark.slow
def test_new_versions_load_old_ones_unload_and_a_broken_one_never_serves(tmp_path, classifier):
    _version(tmp_path, 1)
    server, manager = _manager(tmp_path, classifier, max_wait=0.3)
    core = server.core
    manager.load_initial()
    assert _states(core) == [("1", "AVAILABLE", "OK")]

    async def scenario():
        core.start()
        try:
            # A request to version 1 waits 0.3 s in its batcher while version 2 replaces it.
            in_flight = asyncio.ensure_future(
                core.predict(core.find("sst"), None, [{"text": "ok"}])
            )
            await asyncio.sleep(0.05)
            _version(tmp_path, 2)
            await manager.poll()
            answered = await in_flight
            after_two = (_states(core), core.find("sst").version)
            with pytest.raises(ServingError) as gone:
                core.find("sst", 1)
            _version(tmp_path, 4, broken=True)
            await manager.poll()
            after_broken = (_states(core), core.find("sst").version, core.states[4].error_message)
            await manager.poll()  # unchanged: not tried again
            (tmp_path / "4" / "saved_model.pb").write_bytes(b"")  # fixed
            await manager.poll()
            return answered, after_two, gone.value, after_broken, _states(core)
        finally:
            await core.stop()

    answered, after_two, gone, after_broken, fixed = asyncio.run(scenario())
    assert len(answered["probabilities"]) == 1  # finished on version 1 while it unloaded
    assert after_two == ([("2", "AVAILABLE", "OK"), ("1", "END", "OK")], 2)
    assert (
        gone.code == NOT_FOUND
        and gone.message == "Servable not found for request: Specific(sst, 1)"
    )
    states, latest, message = after_broken
    assert latest == 2 and states[0] == ("4", "END", "DATA_LOSS")
    assert message == f"Can't parse {tmp_path / '4' / 'saved_model.pb'} as binary proto"
    assert states[1:] == [("2", "AVAILABLE", "OK"), ("1", "END", "OK")]
    assert fixed[:2] == [("4", "AVAILABLE", "OK"), ("2", "END", "OK")]
    families = prometheus_text.parse(core.metrics.text())
    attempts = ":tensorflow:cc:saved_model:load_attempt_count"
    assert (
        prometheus_text.value(families, attempts, model_path=str(tmp_path / "4"), status="fail")
        == 1
    )
    assert (
        prometheus_text.value(families, attempts, model_path=str(tmp_path / "4"), status="success")
        == 1
    )
    state = ":bertfit:serving:model_version_state"
    assert prometheus_text.value(families, state, version="4", state="AVAILABLE") == 1


def test_a_broken_newest_version_at_start_is_said_and_all_serves_the_others(tmp_path, classifier):
    _version(tmp_path, 1)
    _version(tmp_path, 2, broken=True)
    server, manager = _manager(tmp_path, classifier, policy="latest:1")
    # The policy wants 2 only, which fails: TF Serving does not start without its model.
    with pytest.raises(ConfigError, match=r"no version could be loaded \(version 2: Can't parse"):
        manager.load_initial()
    server, manager = _manager(tmp_path, classifier, policy="all")
    manager.load_initial()
    assert list(server.core.versions) == [1]
    assert _states(server.core) == [("2", "END", "DATA_LOSS"), ("1", "AVAILABLE", "OK")]


def test_no_loadable_version_at_start_is_a_config_error(tmp_path, classifier):
    _version(tmp_path, 1, broken=True)
    server, manager = _manager(tmp_path, classifier)
    with pytest.raises(ConfigError, match=r"no version could be loaded \(version 1: Can't parse"):
        manager.load_initial()


# ---- ModelService through TF Serving's stubs ----


def _reload(
    live, policy=None, labels=None, name="sst", platform="tensorflow", base_path=None
) -> model_management_pb2.ReloadConfigResponse:
    """HandleReloadConfigRequest of one model, its base_path the served BASE unless given."""
    request = model_management_pb2.ReloadConfigRequest()
    base_path = str(live.core.manager.base) if base_path is None else base_path
    model = request.config.model_config_list.config.add(
        name=name, model_platform=platform, base_path=base_path
    )
    if policy == "all":
        model.model_version_policy.all.SetInParent()
    elif isinstance(policy, list):
        model.model_version_policy.specific.versions.extend(policy)
    for label, version in (labels or {}).items():
        model.version_labels[label] = version
    return live.models.HandleReloadConfigRequest(request, timeout=60)


def _status(live) -> list[tuple[int, str]]:
    """GetModelStatus of model "sst": (version, state) of each, newest first."""
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "sst"
    response = live.models.GetModelStatus(request, timeout=60)
    names = get_model_status_pb2.ModelVersionStatus.State.Name
    return [(s.version, names(s.state)) for s in response.model_version_status]


@pytest.mark.slow
def test_reload_config_and_model_status_through_tf_servings_stubs(tmp_path, classifier):
    for number in (1, 2, 3):
        _version(tmp_path, number)
    server, manager = _manager(tmp_path, classifier)
    manager.load_initial()
    live = LiveServer(server)
    try:

        def status():
            return _status(live)

        assert status() == [(3, "AVAILABLE")]
        assert _reload(live, "all").status.error_code == 0  # labels only once AVAILABLE
        assert _reload(live, "all", {"stable": 1, "canary": 3}).status.error_code == 0
        assert status() == [(3, "AVAILABLE"), (2, "AVAILABLE"), (1, "AVAILABLE")]
        assert live.rest("/v1/models/sst/labels/stable")[0] == 200
        assert _reload(live, [2]).status.error_code == 0
        assert status() == [(3, "END"), (2, "AVAILABLE"), (1, "END")]
        with pytest.raises(grpc.RpcError) as raised:
            _reload(live, [2], {"canary": 3})
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "version 3 of model sst, which is not currently available" in raised.value.details()
        with pytest.raises(grpc.RpcError) as raised:
            _reload(live, name="other")
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "serves one model, 'sst'; the config names ['other']" in raised.value.details()
    finally:
        live.close()


def test_a_refused_reload_changes_nothing_served(tmp_path, classifier):
    for number in (1, 2):
        _version(tmp_path, number)
    server, manager = _manager(tmp_path, classifier, policy="specific:1")
    manager.load_initial()
    live = LiveServer(server)
    try:
        # the default policy (latest: version 2) with a label on version 9, which is not there
        with pytest.raises(grpc.RpcError) as raised:
            _reload(live, labels={"stable": 9})
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "version 9 of model sst, which is not currently available" in raised.value.details()
        assert _status(live) == [(1, "AVAILABLE")] and str(manager.policy) == "specific:1"
        # TF Serving checks labels against the versions AVAILABLE before it loads any: a
        # label on one the same reload would load is refused, and nothing loads.
        with pytest.raises(grpc.RpcError) as raised:
            _reload(live, "all", {"stable": 2})
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "version 2 of model sst, which is not currently available" in raised.value.details()
        assert _status(live) == [(1, "AVAILABLE")] and str(manager.policy) == "specific:1"
        # bertfit's own: a label on a version the new policy would unload
        with pytest.raises(grpc.RpcError) as raised:
            _reload(live, [2], {"stable": 1})
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "the label stable names version 1 of model sst, which the version policy" in (
            raised.value.details()
        )
        for config, words in [
            ({"policy": [2, -1]}, "names version -1; versions are numbers from 0"),
            (
                {"base_path": "export"},
                "Expected model sst to have an absolute path or URI; got base_path()=export",
            ),
            ({"base_path": ""}, "to have an absolute path or URI; got base_path()="),
            ({"platform": "pytorch"}, "platform was tensorflow and new platform requested is"),
            ({"platform": ""}, "Illegal setting neither ModelServerConfig::model_type"),
        ]:
            with pytest.raises(grpc.RpcError) as raised:
                _reload(live, **config)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, config
            assert words in raised.value.details()
            assert list(server.core.versions) == [1] and str(manager.policy) == "specific:1"
        assert server.core.version_labels == {}
        assert _reload(live, [1, 2]).status.error_code == 0  # good ones apply
        assert _reload(live, [2], {"stable": 2}).status.error_code == 0
        assert _status(live) == [(2, "AVAILABLE"), (1, "END")]
        assert server.core.version_labels == {"stable": 2}
    finally:
        live.close()


# ---- `bertfit serve --export BASE` picking up a new version while serving ----


@pytest.mark.slow
def test_bertfit_serve_picks_up_a_new_version_and_reports_a_broken_one(trained_run, tmp_path):
    base = tmp_path / "export"
    export_classifier(load_classifier(trained_run[1].run_dir), base)  # version 1
    flags = ["--port", "0", "--grpc-port", "-1", "--model-name", "sst"]
    process = start_serve("--export", str(base), *flags, "--file-system-poll-wait-seconds", "0.2")
    try:
        line = lines_until(process, "/v1/models/", timeout=180)[-1]
        assert "version 1 (policy latest:1, polling" in line
        url = re.search(r" on (http://\S+?)/v1/models/", line)[1]

        def states() -> list:
            with urllib.request.urlopen(f"{url}/v1/models/sst", timeout=30) as answer:
                return [
                    (s["version"], s["state"])
                    for s in json.loads(answer.read())["model_version_status"]
                ]

        def wait_for(expected) -> None:
            deadline = time.monotonic() + 60
            while states()[: len(expected)] != expected:
                assert time.monotonic() < deadline, states()
                time.sleep(0.2)

        shutil.copytree(base / "1", base / ".2.tmp")  # a new version, renamed into place
        os.replace(base / ".2.tmp", base / "2")
        wait_for([("2", "AVAILABLE"), ("1", "END")])
        body = json.dumps({"instances": ["a fine film"]}).encode()
        with urllib.request.urlopen(f"{url}/v1/models/sst:predict", body, timeout=30) as answer:
            assert len(json.loads(answer.read())["predictions"]) == 1
        (base / "3").mkdir()
        (base / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")
        wait_for([("3", "END"), ("2", "AVAILABLE")])
        with urllib.request.urlopen(f"{url}/v1/models/sst/versions/3", timeout=30) as answer:
            error = json.loads(answer.read())["model_version_status"][0]["status"]
        assert error["error_code"] == "DATA_LOSS" and error["error_message"]
        with urllib.request.urlopen(f"{url}/v1/models/sst:predict", body, timeout=30) as answer:
            assert answer.status == 200  # version 2 still serves
    finally:
        process.terminate()
        process.communicate(timeout=30)
