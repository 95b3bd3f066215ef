"""Fixtures: buckets on local servers (`servers.py`) and TensorFlow's ram:// file system, each
as a fresh URL prefix per test; the servers live for the session and are stopped at its end."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.storage import servers


def _fsspec_conf(env: dict[str, str]) -> None:
    """What fsspec reads from FSSPEC_* variables at import, applied to this process."""
    import fsspec.config

    for key, value in env.items():
        if key.startswith("FSSPEC_"):
            protocol, _, option = key[len("FSSPEC_") :].lower().partition("_")
            fsspec.config.conf.setdefault(protocol, {})[option] = value


@pytest.fixture(scope="session")
def object_stores():
    """Both servers, started once; yields {"gs": env, "s3": env} with the environment of
    both set in this process too."""
    from bertfit import storage

    with servers.gcs_emulator() as gs_env, servers.s3_server() as s3_env:
        saved = {k: os.environ.get(k) for k in {**gs_env, **s3_env}}
        os.environ.update({**gs_env, **s3_env})
        _fsspec_conf(gs_env)
        storage.reset()
        try:
            yield {"gs": gs_env, "s3": s3_env}
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            storage.reset()


def _prefix() -> str:
    return f"{servers.BUCKET}/{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["gs", "s3", "ram"])
def remote(request, object_stores) -> str:
    """A fresh, empty URL prefix on each store: gs://, s3:// and ram://."""
    return f"{request.param}://{_prefix()}"


@pytest.fixture
def gcs(object_stores) -> str:
    return f"gs://{_prefix()}"


@pytest.fixture
def s3(object_stores) -> str:
    return f"s3://{_prefix()}"
