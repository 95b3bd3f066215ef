"""`ServeOptions`: what `bertfit serve` can be told, with its defaults and their checks, in one
place: the CLI builds its flags from these fields (`bertfit.flags`), `bertfit.serve.app.serve`
and `ModelServer` take them, and the server's parts read their defaults here.

Light (no TensorFlow): the CLI parses and checks them before the model loads, so a port no
client could reach or a batch size of 0 is said at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re

from bertfit.config import ENGINES
from bertfit.errors import ConfigError
from bertfit.flags import flag, flags_of

# What TF Serving's URLs can carry as a model NAME: no "/" or ":" (they delimit the path), and
# nothing a URL must escape ("?", "#", "%", spaces, control characters).
_MODEL_NAME = re.compile(r"^[^/:?#%\s\x00-\x1f\x7f]+$")
TF_SERVING_GRPC_PORT = 8500


def parse_version_labels(text: str) -> dict[str, int]:
    """`stable=1,canary=2` → {"stable": 1, "canary": 2}."""
    labels = {}
    for item in filter(None, text.split(",")):
        label, _, version = item.partition("=")
        label, version = label.strip(), version.strip()
        if not label or not version.isdigit() or int(version) < 1 or "/" in label or ":" in label:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not LABEL=VERSION (a label without '/' or ':', a version of 1 or "
                "more); e.g. --version-labels stable=1,canary=2"
            )
        labels[label] = int(version)
    return labels


def _mebibytes(size: int) -> str:
    return f"{size / 2**20:g} MiB"


def _key(help: str):
    """An optional key's field: repr=False, so that a printed ServeOptions shows no key."""
    return dataclasses.field(default=None, repr=False, metadata=flag(help, metavar="KEY"))


def _file(help: str):
    """An optional file's field."""
    return dataclasses.field(default=None, metadata=flag(help, metavar="FILE"))


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """How `bertfit serve` serves: where it listens, how it batches, what it refuses. Each
    field is a flag of `bertfit serve` (its help says what the field means); building one
    checks every value (a `ConfigError` naming the flag).

    Examples:
    >>> ServeOptions(port=0, max_batch=8).max_wait  # seconds (--max-wait-ms 5)
    0.005
    >>> ServeOptions(port=0).grpc_port_to_bind(), ServeOptions().grpc_port_to_bind()
    (0, 8500)
    """

    host: str = dataclasses.field(
        default="127.0.0.1",
        metadata=flag(
            "the address to listen on (default {default}: this machine only; 0.0.0.0: all)"
        ),
    )
    port: int = dataclasses.field(
        default=8501, metadata=flag("the REST API's port (default {default}; 0: any free)")
    )
    grpc_port: int | None = dataclasses.field(
        default=None,
        metadata=flag(
            f"TF Serving's gRPC API (default {TF_SERVING_GRPC_PORT}, or any free port with "
            "--port 0; 0: any free port; -1: no gRPC server)"
        ),
    )
    model_name: str = dataclasses.field(default="model", metadata=flag("NAME in /v1/models/NAME"))
    max_batch: int = dataclasses.field(
        default=64,
        metadata=flag("most texts per model call when batching requests (default {default})"),
    )
    max_wait: float = dataclasses.field(  # seconds
        default=0.005,
        metadata=flag(
            "how long a request waits for others to share its batch, in ms",
            name="--max-wait-ms",
            type=float,
            scale=1000,
        ),
    )
    batch_threads: int = dataclasses.field(
        default=2,
        metadata=flag(
            "batches run at once, each in a thread (TF Serving's num_batch_threads): with 2, "
            "the next batch forms and runs while one runs (default {default})"
        ),
    )
    max_request_instances: int = dataclasses.field(
        default=4096,
        metadata=flag(
            "the most texts one request may send; more is answered 400 (default {default})"
        ),
    )
    max_body_bytes: int = dataclasses.field(  # 4096 instances of 4 KB
        default=16 << 20,
        metadata=flag(
            "largest REST body or gRPC message (default {default}); a larger one is refused "
            "(413 / RESOURCE_EXHAUSTED)",
            name="--max-request-bytes",
            shown=_mebibytes,
        ),
    )
    read_timeout: float = dataclasses.field(
        default=30.0,
        metadata=flag(
            "a request's headers and body must arrive within this (default {default}); a "
            "slower one is answered 408 and its connection closed",
            name="--read-timeout-seconds",
        ),
    )
    version_policy: str = dataclasses.field(
        default="latest",
        metadata=flag(
            "which versions of --export BASE to serve (TF Serving's model_version_policy): "
            "latest (default), latest:N, all, or specific:1,3"
        ),
    )
    poll_wait: float = dataclasses.field(  # TF Serving's default (server.h)
        default=1.0,
        metadata=flag(
            "how often --export BASE is polled for new or removed versions (TF Serving's flag, "
            "default {default}; 0: only at start)",
            name="--file-system-poll-wait-seconds",
        ),
    )
    max_queued_requests: int = dataclasses.field(
        default=256,
        metadata=flag(
            "most requests in progress at once (default {default}); one more is answered 429 "
            "/ RESOURCE_EXHAUSTED at once"
        ),
    )
    rest_timeout: float = dataclasses.field(  # seconds; TF Serving's default (server.h)
        default=30.0,
        metadata=flag(
            "a REST request's deadline once its body is in (TF Serving's flag, default "
            "{default}); past it: 504. gRPC requests keep their client's deadline",
            name="--rest-api-timeout-in-ms",
            scale=1000,
        ),
    )
    version_labels: dict[str, int] = dataclasses.field(
        default_factory=dict,
        metadata=flag(
            "labels for /v1/models/NAME/labels/LABEL, e.g. stable=1,canary=2 (TF Serving's "
            "version_labels)",
            type=parse_version_labels,
        ),
    )
    enable_cors: bool = dataclasses.field(
        default=False,
        metadata=flag(
            "add CORS headers (Access-Control-Allow-Origin: *) to every answer", switch=True
        ),
    )
    # Who gets in (`bertfit.serve.security`).
    api_key: str | None = _key(
        "ask every REST request for 'Authorization: Bearer KEY' and every gRPC call for the "
        "metadata 'authorization: Bearer KEY' (else 401 / UNAUTHENTICATED); prefer "
        "--api-key-file, as other users of this machine can read a command line"
    )
    api_key_file: str | None = _file("--api-key's key, read from this file")
    admin_key: str | None = _key(
        "the key gRPC's HandleReloadConfigRequest must carry instead; without it a reload is "
        "taken only from this machine (loopback)"
    )
    admin_key_file: str | None = _file("--admin-key's key, read from this file")
    tls_cert: str | None = _file(
        "serve REST (https) and gRPC over TLS with this PEM certificate chain"
    )
    tls_key: str | None = _file("--tls-cert's PEM private key")

    engine: str = dataclasses.field(
        default=ENGINES[0],
        metadata=flag(
            "what answers text requests: tensorflow (default) or onnx (the run's ONNX export in "
            "ONNX Runtime, made once and kept in the run; --run only; the signatures' metadata, "
            "classify_ids and the Classify/Regress APIs stay TensorFlow's)",
            choices=ENGINES,
        ),
    )

    def __post_init__(self):
        for problem in self._problems():
            raise ConfigError(problem)

    def replace(self, **changes) -> ServeOptions:
        """These options with `changes` (checked like any)."""
        return dataclasses.replace(self, **changes) if changes else self

    @property
    def max_connections(self) -> int:
        """The most connections (REST: uvicorn's `limit_concurrency`, a 503 past it) and gRPC
        calls at once: requests whose bodies are still arriving count against them before they
        count against `max_queued_requests`, so they get room for 4 times as many."""
        return 4 * self.max_queued_requests

    def batching(self) -> dict:
        """The batcher's settings, as `ServedVersion`, `load_version` and `served_versions`
        take them."""
        return {
            "max_batch": self.max_batch,
            "max_wait": self.max_wait,
            "batch_threads": self.batch_threads,
        }

    def grpc_port_to_bind(self) -> int:
        """--grpc-port, or TF Serving's 8500; with --port 0 (any free port) any free one too,
        so that a server started for a test or beside others takes no fixed port."""
        if self.grpc_port is not None:
            return self.grpc_port
        return 0 if self.port == 0 else TF_SERVING_GRPC_PORT

    def _problems(self):
        """The messages of options no server can work with, the first one first."""
        if not isinstance(self.model_name, str) or not _MODEL_NAME.match(self.model_name):
            yield (
                f"--model-name {self.model_name!r} cannot be routed in TF Serving's URLs "
                "(/v1/models/NAME:predict): use a non-empty name without '/', ':', '?', '#', "
                "'%' or spaces, e.g. --model-name sst"
            )
        if not 0 <= self.port <= 65535:
            yield (
                f"--port {self.port} is not a TCP port; use one from 1 to 65535 (e.g. 8501), "
                "or 0 for any free port"
            )
        if self.grpc_port is not None and not -1 <= self.grpc_port <= 65535:
            yield (
                f"--grpc-port {self.grpc_port} is not a TCP port; use one from 1 to 65535 (TF "
                f"Serving's is {TF_SERVING_GRPC_PORT}), 0 for any free port, or -1 for no gRPC "
                "server"
            )
        at_least_one = ("max_batch", "batch_threads", "max_request_instances", "max_body_bytes")
        for name in (*at_least_one, "max_queued_requests"):
            value = getattr(self, name)
            if value < 1:
                yield f"{FLAGS[name].name} must be at least 1, got {value}"
        if not self.max_wait >= 0:  # NaN too
            yield f"--max-wait-ms must be 0 or more, got {self.max_wait * 1000}"
        if not 0 < self.read_timeout < math.inf:
            yield (f"--read-timeout-seconds must be more than 0 (e.g. 30), got {self.read_timeout}")
        if not 0 < self.rest_timeout < math.inf:
            yield (
                "--rest-api-timeout-in-ms must be more than 0 (e.g. 30000), got "
                f"{self.rest_timeout * 1000}"
            )
        for name in ("api_key", "admin_key"):
            if getattr(self, name) is not None and getattr(self, f"{name}_file") is not None:
                flag_name = FLAGS[name].name
                yield f"{flag_name} and {flag_name}-file both give the key: pass one of them"
        for name in ("api_key", "admin_key"):
            key = getattr(self, name)
            if key is not None and not key.strip():
                yield f"{FLAGS[name].name} is empty: pass the key clients will send"
        if (self.tls_cert is None) != (self.tls_key is None):
            yield "--tls-cert and --tls-key come together: pass the certificate and its key"
        if not 0 <= self.poll_wait < math.inf:
            yield (
                "--file-system-poll-wait-seconds must be 0 (poll once, at start) or more, got "
                f"{self.poll_wait}"
            )


# `bertfit serve`'s flags, by field.
FLAGS = {spec.field: spec for spec in flags_of(ServeOptions)}
