"""Local object-store servers for the storage tests, on 127.0.0.1: a GCS emulator
(gcp-storage-emulator, in memory) and an S3 server (moto's server mode), each started and
stopped by the tests. `environment()` is what a bertfit process needs to reach them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

BUCKET = "bertfit-test"


@contextlib.contextmanager
def gcs_emulator() -> Iterator[dict[str, str]]:
    """A GCS emulator holding the bucket `BUCKET`; yields the environment that points
    gcsfs at it (no credentials: `FSSPEC_GS_TOKEN=anon`)."""
    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.WARNING)
    server = create_server("127.0.0.1", 0, in_memory=True, default_bucket=BUCKET)
    server.start()
    port = server._api._httpd.server_address[1]  # port 0: the one bound (no public name)
    try:
        yield {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "FSSPEC_GS_TOKEN": "anon"}
    finally:
        server.stop()


@contextlib.contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    """moto's S3 server holding the bucket `BUCKET`; yields the environment that points
    s3fs (botocore) at it."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)
        yield env
    finally:
        server.stop()
