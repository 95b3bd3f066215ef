"""The HTTP server: Starlette (routing, requests) on uvicorn (the ASGI server).

Why these: uvicorn is the maintained, production ASGI server most Python services run on, and
Starlette is the small ASGI toolkit under FastAPI; together they give an asyncio event loop, so
dynamic batching needs no threads besides the one that runs TensorFlow.

    GET  /healthz
    GET  /v1/models/NAME[/versions/V]             model status
    GET  /v1/models/NAME[/versions/V]/metadata    signatures
    POST /v1/models/NAME[/versions/V]:predict     {"instances": [...]} or {"inputs": ...}

A request the model cannot take is answered 400 with TF Serving's `{"error": "..."}` body: the
checks in `bertfit.serve.rest` refuse it before it joins a batch, and a batch that fails anyway
is retried request by request (`DynamicBatcher`), so one bad request fails only itself. Only a
broken server answers 500.
"""

from __future__ import annotations

import contextlib
import errno
import re
import socket

import numpy as np
import tensorflow as tf
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bertfit.errors import ConfigError
from bertfit.inference.graph import IdLimits
from bertfit.inference.predictor import Classifier
from bertfit.serve.batching import DynamicBatcher
from bertfit.serve.rest import (
    RequestError,
    Signature,
    format_predict,
    model_metadata,
    model_status,
    parse_predict,
)

_MODEL_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
    r"(?P<verb>:predict|/metadata)?$"
)
# What TF Serving's URLs can carry as a model NAME: no "/" or ":" (they delimit the path), and
# nothing a URL must escape ("?", "#", "%", spaces, control characters).
_MODEL_NAME = re.compile(r"^[^/:?#%\s\x00-\x1f\x7f]+$")


class ModelServer:
    """Serves one classifier under one model name and version.

    Args:
        classifier: the loaded classifier (`bertfit.load_classifier`).
        model_name: the NAME in the URLs (TF Serving's container calls it "model").
        version: the version reported and accepted in `/versions/V`.
        max_batch: most texts per model call when batching requests together.
        max_wait: seconds a request waits for others to share its batch.
        max_request_instances: most instances in one request.
        max_body_bytes: largest request body.
    """

    def __init__(
        self,
        classifier: Classifier,
        model_name: str = "model",
        version: str = "1",
        max_batch: int = 64,
        max_wait: float = 0.005,
        max_request_instances: int = 4096,
        max_body_bytes: int = 32 << 20,
    ):
        check_options(
            model_name=model_name,
            max_batch=max_batch,
            max_wait=max_wait,
            max_request_instances=max_request_instances,
            max_body_bytes=max_body_bytes,
        )
        self.classifier = classifier
        self.model_name = model_name
        self.version = version
        self.max_request_instances = max_request_instances
        self.max_body_bytes = max_body_bytes
        self.functions = classifier.signatures()
        self.signatures = {name: Signature.of(name, f) for name, f in self.functions.items()}
        self.limits = IdLimits.of_module(classifier.module)
        self.batcher = DynamicBatcher(self._classify_texts, max_batch, max_wait)

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app):
            self.batcher.start()
            yield
            await self.batcher.stop()

        return Starlette(
            routes=[
                Route("/healthz", self.health),
                Route("/v1/models/{rest:path}", self.models, methods=["GET", "POST"]),
            ],
            lifespan=lifespan,
        )

    async def health(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {"status": "ok", "model": self.model_name, "batches": self.batcher.batches}
        )

    async def models(self, request: Request) -> JSONResponse:
        try:
            return JSONResponse(await self._models(request))
        except RequestError as e:
            return _error(str(e), e.status)
        except (tf.errors.InvalidArgumentError, UnicodeError) as e:
            # What the model refused, on this request alone (a failed batch is retried
            # request by request): the request's fault, as TF Serving answers it.
            return _error(_model_error(e), 400)
        except Exception as e:  # the server is broken; still a JSON body
            return _error(f"internal error: {type(e).__name__}: {e}"[:2000], 500)

    async def _models(self, request: Request) -> dict:
        match = _MODEL_PATH.match(request.url.path)
        if match is None:
            raise RequestError(f"Malformed request: {request.method} {request.url.path}", 404)
        name, version, verb = match["name"], match["version"], match["verb"]
        if name != self.model_name or version not in (None, self.version):
            found = f"Specific({name}, {version})" if version else f"Latest({name})"
            raise RequestError(f"Servable not found for request: {found}", 404)
        if verb == ":predict":
            if request.method != "POST":
                raise RequestError("predict needs POST", 405)
            return await self._predict(await self._body(request))
        if request.method != "GET":
            raise RequestError(f"Malformed request: POST {request.url.path}", 405)
        if verb == "/metadata":
            return model_metadata(self.model_name, self.version, self.signatures)
        return model_status(self.version)

    async def _body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise RequestError(
                f"the request body has {declared} bytes; at most {self.max_body_bytes} are accepted"
            )
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_body_bytes:
                raise RequestError(f"the request body is larger than {self.max_body_bytes} bytes")
        return bytes(body)

    async def _predict(self, body: bytes) -> dict:
        request = parse_predict(body, self.signatures, self.max_request_instances, self.limits)
        if request.signature.name == "serving_default":
            outputs = await self.batcher.submit(request.rows)
        else:
            outputs = await self._call_directly(request)
        return format_predict(request, outputs)

    async def _call_directly(self, request) -> list[dict]:
        names = list(request.signature.inputs)
        inputs = {n: tf.constant([row[n] for row in request.rows], tf.int32) for n in names}
        function = self.functions[request.signature.name]
        result = await self.batcher.run_alone(lambda: function(**inputs))
        return _rows({k: v.numpy() for k, v in result.items()})

    def _classify_texts(self, rows: list[dict]) -> list[dict]:
        """The batcher's batch in one model call (a request larger than `max_batch`, which
        comes whole, in calls of `max_batch` rows): each text is tokenized once."""
        results = []
        for start in range(0, len(rows), self.batcher.max_batch):
            chunk = rows[start : start + self.batcher.max_batch]
            texts = [row["text"] for row in chunk]
            pairs = [row["text_pair"] for row in chunk] if self.classifier.pairs else None
            results += _rows(self.classifier.classify_batch(texts, pairs))
        return results


def _rows(outputs: dict[str, np.ndarray]) -> list[dict]:
    """{name: [batch, ...]} → one {name: value} per row."""
    size = len(next(iter(outputs.values())))
    return [{name: values[i] for name, values in outputs.items()} for i in range(size)]


def _error(message: str, status: int) -> JSONResponse:
    """TF Serving's error body. Messages quote the request, which may hold lone surrogates:
    they are escaped (\\ud800) so that the body is UTF-8."""
    text = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": text}, status_code=status)


def _model_error(error: Exception) -> str:
    """The line of a TensorFlow error that says what was wrong, without its graph trace."""
    if not isinstance(error, tf.errors.OpError):
        return f"the model could not take the request: {error}"
    skip = ("[[", "File ", "Detected at node", "Graph execution error", "<stack traces")
    lines = [line.strip() for line in error.message.splitlines()]
    useful = [line for line in lines if line and not line.startswith(skip)]
    return f"the model refused the request: {useful[-1] if useful else error.message}"[:2000]


def check_options(
    model_name: str = "model",
    port: int = 8501,
    max_batch: int = 1,
    max_wait: float = 0.0,
    max_request_instances: int = 1,
    max_body_bytes: int = 1,
) -> None:
    """`ConfigError`s for serving options no server can work with."""
    if not isinstance(model_name, str) or not _MODEL_NAME.match(model_name):
        raise ConfigError(
            f"--model-name {model_name!r} cannot be routed in TF Serving's URLs "
            "(/v1/models/NAME:predict): use a non-empty name without '/', ':', '?', '#', '%' "
            "or spaces, e.g. --model-name sst"
        )
    if not 0 <= port <= 65535:
        raise ConfigError(
            f"--port {port} is not a TCP port; use one from 1 to 65535 (e.g. 8501), or 0 for any "
            "free port"
        )
    for flag, value, least in [
        ("--max-batch", max_batch, 1),
        ("--max-request-instances", max_request_instances, 1),
        ("max_body_bytes", max_body_bytes, 1),
    ]:
        if value < least:
            raise ConfigError(f"{flag} must be at least {least}, got {value}")
    if not max_wait >= 0:  # NaN too
        raise ConfigError(f"--max-wait-ms must be 0 or more, got {max_wait * 1000}")


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port and listening, or a `ConfigError` that says why not (the
    port in use, no permission, not an address of this machine)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(
            f"--host {host!r} is not a host name or address this machine knows ({e})"
        ) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} is in use on {host}; stop what is serving there, or pass another "
                "--port"
            ) from None
        if e.errno == errno.EACCES:
            raise ConfigError(
                f"no permission to listen on port {port}; ports below 1024 need root: use "
                "another --port (e.g. 8501)"
            ) from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(
                f"--host {host} is not an address of this machine; use 127.0.0.1 (this machine "
                "only) or 0.0.0.0 (every interface)"
            ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


def serve(
    path: str, host: str = "127.0.0.1", port: int = 8501, model_name: str = "model", **options
) -> None:
    """Loads the classifier at `path` (a run directory or an export) and serves it until
    interrupted. The port is taken before the model loads, so a busy port is said at once."""
    import uvicorn

    from bertfit.inference.predictor import load_classifier

    check_options(model_name=model_name, port=port, **options)
    sock = listen(host, port)
    port = sock.getsockname()[1]  # the one bound: --port 0 takes any free port
    try:
        classifier = load_classifier(path)
        version = str(classifier.metadata.get("version", 1))
        server = ModelServer(classifier, model_name, version, **options)
        classifier.classify_batch(["warm up"], ["warm up"] if classifier.pairs else None)
        print(
            f"bertfit serve: {path} as model {model_name!r} version {version} on "
            f"http://{host}:{port}/v1/models/{model_name}",
            flush=True,
        )
        config = uvicorn.Config(server.app(), host=host, port=port, log_level="warning")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
