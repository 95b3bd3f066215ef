"""The HTTP server: Starlette (requests) on uvicorn (the ASGI server).

Why these: uvicorn is the maintained, production ASGI server most Python services run on, and
Starlette is the small ASGI toolkit under FastAPI; together they give an asyncio event loop, so
dynamic batching needs no threads besides the one that runs TensorFlow.

    GET  /healthz                                            bertfit's own
    GET  /v1/models/NAME[/versions/V | /labels/L]            model status
    GET  /v1/models/NAME[/versions/V | /labels/L]/metadata   signatures
    POST /v1/models/NAME[/versions/V | /labels/L]:predict    {"instances": [...]} or {"inputs": ...}
    POST /v1/models/NAME[/versions/V | /labels/L]:classify   {"examples": [...]}
    POST /v1/models/NAME[/versions/V | /labels/L]:regress    {"examples": [...]}
    OPTIONS /v1/...                                          CORS preflight
    POST /classify (and /v1/classify)                        vLLM's (SGLang's) classify API
    POST /predict                                            TEI's predict API

Every path under /v1/ is TF Serving's (`bertfit.serve.rest` parses it and its body,
`bertfit.serve.core` answers): a request it cannot take is answered with TF Serving's status
and `{"error": "..."}` body; a request the model refuses is a 400 (a batch that fails is retried
request by request, `DynamicBatcher`, so one bad request fails only itself). Only a broken
server answers 500. `/classify` and `/predict` (`bertfit.serve.text_apis`) answer from the same
model core, batcher and metrics, with their own servers' bodies and errors.

With an API key (`bertfit.serve.security`) every path answers 401 to a request without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import math
import os
import re
import socket
import time
from pathlib import Path

import tensorflow as tf
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bertfit import storage
from bertfit.errors import ConfigError, MissingDependencyError
from bertfit.inference.predictor import Classifier
from bertfit.serve import rest, text_apis
from bertfit.serve.core import (
    DEADLINE_EXCEEDED,
    FAILED_PRECONDITION,
    INTERNAL,
    PREDICT_METHOD,
    ModelCore,
    ServedVersion,
    ServingError,
    model_error,
    read_saved_model,
)
from bertfit.serve.options import ServeOptions
from bertfit.serve.security import Access, RequireKey, tls_pair
from bertfit.serve.versions import VersionManager, VersionPolicy, version_folders

_CORS_HEADERS = {  # http_rest_api_util.cc AddCORSHeaders
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, GET",
    "Access-Control-Allow-Headers": "Content-Type",
}
_JSON = "application/json"
METRICS_PATH = "/monitoring/prometheus/metrics"  # util/prometheus_exporter.cc kPrometheusPath


class ModelServer:
    """Serves a model's versions over TF Serving's REST API.

    Args:
        classifier: the loaded classifier (`bertfit.load_classifier`), served as `version`;
            or None with `versions` given.
        model_name: the NAME in the URLs (default: `options`'; TF Serving's container calls
            it "model").
        version: the version number of `classifier`.
        versions: the `ServedVersion`s to serve instead of `classifier` (the latest answers
            requests that name no version).
        options: how to serve (`ServeOptions`: batching, limits, deadlines, labels, CORS);
            `settings` change some of its fields, e.g. `max_wait=0.05`. Its port, host and
            version policy are `serve`'s.
    """

    def __init__(
        self,
        classifier: Classifier | None,
        model_name: str | None = None,
        version: int = 1,
        versions: list[ServedVersion] | None = None,
        options: ServeOptions | None = None,
        **settings,
    ):
        if model_name is not None:
            settings["model_name"] = model_name
        self.options = options = (options or ServeOptions()).replace(**settings)
        if versions is None:
            versions = [ServedVersion(int(version), classifier, **options.batching())]
        check_version_labels(options.version_labels, [served.version for served in versions])
        self.core = ModelCore(
            options.model_name,
            versions,
            options.version_labels,
            options.max_request_instances,
            options.max_queued_requests,
        )
        self.model_name = options.model_name
        self.max_body_bytes = options.max_body_bytes
        self.read_timeout = options.read_timeout
        self.rest_timeout = options.rest_timeout
        self.enable_cors = options.enable_cors
        self.access = Access.of(options)
        self._grpc_server = None
        self._grpc_stopped: asyncio.Task | None = None

    @property
    def batcher(self):
        """The latest version's batcher."""
        return self.core.latest.batcher

    @property
    def limits(self):
        return self.core.latest.limits

    @limits.setter
    def limits(self, value):
        self.core.latest.limits = value

    def app(self, grpc_server=None) -> Starlette:
        """The ASGI app; with `grpc_server` (a bound `grpc.aio.Server`, `bertfit.serve.grpc.bind`)
        it also runs TF Serving's gRPC services on the same event loop and model core."""

        @contextlib.asynccontextmanager
        async def lifespan(app):
            self.core.start()
            self.core.draining, self._grpc_server, self._grpc_stopped = False, grpc_server, None
            if grpc_server is not None:
                from bertfit.serve import grpc as grpc_api

                grpc_api.add_services(grpc_server, self.core, self.access)
                await grpc_server.start()
            yield
            self.drain()
            if self._grpc_stopped is not None:
                await self._grpc_stopped
            await self.core.stop()

        methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
        vllm = functools.partial(self._text_api, text_apis.VLLM_API)
        tei = functools.partial(self._text_api, text_apis.TEI_API)
        gate = []
        if self.access.api_key is not None:
            headers = self._headers({})
            gate = [Middleware(RequireKey, access=self.access, headers=headers)]
        return Starlette(
            routes=[
                Route("/healthz", self.health),
                Route(METRICS_PATH, self.metrics),
                Route("/classify", vllm, methods=["POST"]),
                Route("/v1/classify", vllm, methods=["POST"]),  # SGLang's path
                Route("/predict", tei, methods=["POST"]),
                Route("/{path:path}", self.dispatch, methods=methods),
            ],
            middleware=gate,
            lifespan=lifespan,
        )

    def drain(self) -> None:
        """Takes no new requests (UNAVAILABLE / 503), and stops the gRPC server once its calls
        in progress have finished (at most `rest_timeout` seconds): SIGTERM's first step; the
        HTTP server's own drain is uvicorn's. Call it in the server's event loop."""
        self.core.draining = True
        if self._grpc_server is not None and self._grpc_stopped is None:
            stopping = self._grpc_server.stop(grace=self.rest_timeout)
            self._grpc_stopped = asyncio.ensure_future(stopping)

    async def metrics(self, request: Request) -> Response:
        """TF Serving's Prometheus endpoint (`util/prometheus_exporter.cc`, text/plain)."""
        return Response(self.core.metrics.text().encode(), 200, media_type="text/plain")

    async def health(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {"status": "ok", "model": self.model_name, "batches": self.batcher.batches}
        )

    async def dispatch(self, request: Request) -> Response:
        path = _raw_path(request)
        if not rest.REST_PATHS.fullmatch(path):  # TF Serving's server ignores it: 404
            return Response(b"", 404, headers=self._headers({}))
        started = time.monotonic()
        if request.method == "OPTIONS":  # http_server.cc: a CORS preflight needs an Origin
            origin = request.headers.get("origin", "")
            status = 200 if re.search(r"https?://", origin) else 400
            code = "OK" if status == 200 else FAILED_PRECONDITION
            self.core.record("", "", "REST", code, started)
            return Response(b"", status, headers=self._headers({}))
        route = None
        try:
            route = rest.route(request.method, path)
            status, body, code = 200, await self._answer(request, route), "OK"
        except Exception as e:
            refusal = serving_error(e)
            status, body, code = refusal.http_status, rest.error_body(refusal.message), refusal.code
        # TF Serving records every request it dispatches: the model name and the API as parsed
        # from the path ("" when it is malformed; a status or metadata request has no API).
        model_name, api = (route.model_name, route.api) if route else ("", "")
        self.core.record(model_name, api, "REST", code, started)
        return self._json(status, body)

    async def _text_api(self, api: str, request: Request) -> Response:
        """vLLM's `/classify` or TEI's `/predict` (`bertfit.serve.text_apis`), recorded in the
        request metrics as TF Serving's APIs are, with the path as the API."""
        answer, error = {
            text_apis.VLLM_API: (text_apis.vllm_classify, text_apis.vllm_error),
            text_apis.TEI_API: (text_apis.tei_predict, text_apis.tei_error),
        }[api]
        started = time.monotonic()
        try:
            body = await self._model_call(request, lambda body: answer(self.core, body))
            status, document, code = 200, body, "OK"
        except Exception as e:
            refusal = serving_error(e)
            (status, document), code = error(refusal), refusal.code
        self.core.record(self.model_name, api, "REST", code, started)
        return self._json(status, json.dumps(document, ensure_ascii=False, allow_nan=False))

    def _json(self, status: int, body: str) -> Response:
        headers = self._headers({"Content-Type": _JSON})
        if status in (408, 413):  # the body was not all read: the connection ends
            headers["Connection"] = "close"
        return Response(body.encode("utf-8"), status, headers=headers)

    def _headers(self, headers: dict) -> dict:
        return {**headers, **_CORS_HEADERS} if self.enable_cors else headers

    async def _answer(self, request: Request, route: rest.Route) -> str:
        core = self.core
        if route.call == "status":
            return rest.json_body(core.model_status(route.model_name, route.version, route.label))
        if route.call == "metadata":
            return rest.json_body(core.model_metadata(route.model_name, route.version, route.label))

        async def call(body: bytes) -> str:
            document = rest.parse_body(body)
            served = core.find(route.model_name, route.version, route.label)
            return await self._call(route, served, document)

        return await self._model_call(request, call)

    async def _model_call(self, request: Request, answer):
        """`await answer(body)` for a request to the model: admitted once its body is in (a
        client that stalls sending it is cut at --read-timeout-seconds and never holds a place
        in the queue), within --rest-api-timeout-in-ms."""
        body = await self._body(request)
        with self.core.admit():
            try:
                return await asyncio.wait_for(answer(body), self.rest_timeout)
            except asyncio.TimeoutError:
                raise ServingError(
                    f"the request did not finish within {self.rest_timeout * 1000:g} ms; send "
                    "fewer instances, or start the server with a larger --rest-api-timeout-in-ms",
                    DEADLINE_EXCEEDED,
                ) from None

    async def _call(self, route: rest.Route, served: ServedVersion, document: dict) -> str:
        core = self.core
        name = rest.signature_name(document)
        if route.call == "predict":
            signature = core.signature(served, name, PREDICT_METHOD)
            rows, columnar = rest.predict_rows(document, signature)
            return rest.predict_body(await core.predict(served, name, rows), columnar)
        examples = rest.examples(document, route.call)
        if route.call == "classify":
            return rest.classify_body(await core.classify(served, name, examples))
        return rest.regress_body(await core.regress(served, name, examples))

    async def _body(self, request: Request) -> bytes:
        """The request's body: a 413 past `max_body_bytes` (said from Content-Length before
        reading), a 408 when it has not all arrived within `read_timeout` seconds."""
        most = self.max_body_bytes
        advice = "send fewer or shorter instances, or start the server with a larger"
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > most:
            raise ServingError(
                f"the request body has {declared} bytes; at most {most} are accepted ({advice} "
                "--max-request-bytes)",
                http_status=413,
            )
        body = bytearray()

        async def read() -> None:
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > most:
                    raise ServingError(
                        f"the request body is larger than {most} bytes ({advice} "
                        "--max-request-bytes)",
                        http_status=413,
                    )

        try:
            await asyncio.wait_for(read(), self.read_timeout)
        except asyncio.TimeoutError:
            raise ServingError(
                f"the request body did not arrive within {self.read_timeout:g} s ({len(body)} "
                "bytes came); send the whole body at once, or start the server with a larger "
                "--read-timeout-seconds",
                http_status=408,
            ) from None
        return bytes(body)


def serving_error(error: Exception) -> ServingError:
    """How a REST request that raised `error` is answered."""
    if isinstance(error, ServingError):
        return error
    if isinstance(error, (tf.errors.InvalidArgumentError, UnicodeError)):
        # What the model refused, on this request alone (a failed batch is retried request
        # by request): the request's fault, as TF Serving answers it.
        return ServingError(model_error(error))
    # The server is broken; still a JSON body.
    return ServingError(f"internal error: {type(error).__name__}: {error}"[:2000], INTERNAL)


def _raw_path(request: Request) -> str:
    """The path as the client sent it (escapes kept: TF Serving unescapes the model name and
    label itself)."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else request.url.path


def check_version_labels(labels: dict[str, int], versions: list[int]) -> None:
    """`ConfigError` for a label naming a version that is not served."""
    for label, version in labels.items():
        if version not in versions:
            raise ConfigError(
                f"--version-labels {label}={version}: version {version} is not served (the "
                f"export has {', '.join(map(str, versions))}); label one of those"
            )


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


def export_base(path: str | Path) -> Path | None:
    """`path` when it is an export's BASE folder (numbered versions, TF Serving's layout),
    else None (a run directory, or one version's folder)."""
    path = Path(path)
    if not path.is_dir() or (path / "saved_model.pb").is_file():
        return None
    versions = version_folders(path).values()
    return path if any((v / "saved_model.pb").is_file() for v in versions) else None


def load_version(
    number: int,
    folder: Path,
    max_batch: int = ServeOptions.max_batch,
    max_wait: float = ServeOptions.max_wait,
    batch_threads: int = ServeOptions.batch_threads,
) -> ServedVersion:
    """Version `number` of an export, loaded from `folder` and warmed up (its first call
    traces the graph: not a request's wait)."""
    from bertfit.inference.predictor import Classifier

    read_saved_model(folder)  # TensorFlow's NOT_FOUND or DATA_LOSS, as TF Serving reports it
    batching = {"max_batch": max_batch, "max_wait": max_wait, "batch_threads": batch_threads}
    served = ServedVersion(
        number, Classifier.from_export(folder), **batching, saved_model_dir=folder
    )
    _warm_up(served)
    return served


def _warm_up(served: ServedVersion) -> None:
    for classifier in {id(c): c for c in (served.classifier, served.texts_engine)}.values():
        classifier.classify_batch(["warm up"], ["warm up"] if classifier.pairs else None)


def served_versions(
    path: str | Path,
    max_batch: int = ServeOptions.max_batch,
    max_wait: float = ServeOptions.max_wait,
    policy: VersionPolicy | None = None,
    texts_engine=None,
    batch_threads: int = ServeOptions.batch_threads,
) -> list[ServedVersion]:
    """The versions to serve from `path`, loaded once: an export's versions that `policy`
    wants (TF Serving's default: the latest), else the one classifier at `path` (a run
    directory is version 1, a version folder its number), its text requests answered by
    `texts_engine` if given (see `ServedVersion`)."""
    from bertfit.inference.predictor import Classifier, export_version_dir, load_classifier

    batching = {"max_batch": max_batch, "max_wait": max_wait, "batch_threads": batch_threads}
    base = None if storage.is_url(path) else export_base(path)
    if base is not None:
        folders = version_folders(base)
        wanted = sorted((policy or VersionPolicy()).aspired(list(folders)))
        return [
            ServedVersion(
                n, Classifier.from_export(folders[n]), **batching, saved_model_dir=folders[n]
            )
            for n in wanted
        ]
    classifier = load_classifier(path)
    exported = "version" in classifier.metadata and isinstance(path, Path)  # (a URL: copied)
    folder = export_version_dir(path) if exported else None
    number = int(classifier.metadata.get("version", 1))
    return [
        ServedVersion(
            number, classifier, **batching, saved_model_dir=folder, texts_engine=texts_engine
        )
    ]


def serve(
    path: str,
    options: ServeOptions | None = None,
    engine_export: str | Path | None = None,
    **settings,
) -> None:
    """Loads the classifier at `path` (a run directory, or an export BASE: the versions
    `options.version_policy` wants, polled every `options.poll_wait` seconds for new ones) and
    serves it until SIGTERM: TF Serving's REST API on `options.port`, and its gRPC API on
    `options.grpc_port_to_bind()` (-1: none) in the same event loop. `settings` change some of
    `options`' fields (`ServeOptions`: `bertfit serve`'s flags, and their defaults). The ports
    are taken before the model loads, so a busy port is said at once."""
    import asyncio

    options = (options or ServeOptions()).replace(**settings)
    policy = VersionPolicy.parse(options.version_policy)
    if options.grpc_port_to_bind() >= 0:
        _import_grpc()
    if engine_export is not None and export_base(path) is not None:
        raise ConfigError(
            "--engine onnx serves a run directory (--run RUN), whose ONNX export answers its "
            "text requests; an export BASE of SavedModel versions is served by --engine "
            "tensorflow (the default)."
        )
    sock = listen(options.host, options.port)
    try:
        asyncio.run(_serve(sock, path, options, policy, engine_export))
    finally:
        sock.close()


async def _serve(sock, path: str, options: ServeOptions, policy: VersionPolicy, engine_export):
    port = sock.getsockname()[1]  # the one bound: --port 0 takes any free port
    tls = tls_pair(options.tls_cert, options.tls_key)
    # The keys are read before the model loads (a missing key file is said at once).
    # The labels are checked once the versions they name are loaded (`_load_versions`).
    server = ModelServer(None, versions=[], options=options.replace(version_labels={}))
    grpc_server, grpc_port = None, options.grpc_port_to_bind()
    if grpc_port >= 0:  # bound in the loop that will run it, before the model loads
        from bertfit.serve import grpc as grpc_api

        grpc_server, grpc_port = grpc_api.bind(
            options.host, grpc_port, options.max_body_bytes, options.max_connections, tls
        )
    base = _load_versions(server.core, path, options, policy, engine_export)
    numbers = ", ".join(str(number) for number in server.core.versions)
    if base is not None:
        numbers += f" (policy {policy}, polling {base} every {options.poll_wait:g} s)"
    name, host = options.model_name, options.host
    scheme, secured = ("https", " over TLS") if tls else ("http", "")
    print(
        f"bertfit serve: {path} as model {name!r} version {numbers} on "
        f"{scheme}://{host}:{port}/v1/models/{name}",
        flush=True,
    )
    if grpc_server is not None:
        print(f"bertfit serve: gRPC (TF Serving's API){secured} on {host}:{grpc_port}", flush=True)
    if server.access.api_key is not None:
        print("bertfit serve: every request must carry the API key", flush=True)
    protocol = read_deadline_protocol(server.read_timeout)
    config = uvicorn.Config(
        server.app(grpc_server),
        log_level="warning",
        http=protocol,
        timeout_graceful_shutdown=max(1, math.ceil(server.rest_timeout)),
        limit_concurrency=options.max_connections,
        ssl_certfile=options.tls_cert,
        ssl_keyfile=options.tls_key,
    )
    await DrainingServer(config, server).serve(sockets=[sock])
    print("bertfit serve: drained and stopped", flush=True)


def _load_versions(
    core: ModelCore, path: str, options: ServeOptions, policy: VersionPolicy, engine_export=None
) -> Path | None:
    """Loads what `path` serves into `core` (an export BASE: the versions `policy` wants,
    managed from then on; else the one classifier, its text requests answered by the ONNX
    export `engine_export` when given) and its labels; the BASE, or None."""
    batching = options.batching()
    base = export_base(path)
    if base is not None:  # polled for new versions while serving
        load = functools.partial(load_version, **batching)
        VersionManager(core, base, policy, load, options.poll_wait).load_initial()
    else:
        texts_engine = None
        if engine_export is not None:
            from bertfit.inference.onnx_runtime import load_onnx_classifier

            # One thread a call, a call per core: a call on two threads spins its caller while
            # the other waits for a core the event loop holds (a quarter of the server's
            # samples in ONNX Runtime's spin loop under bench/serve's 16 clients); calls of
            # their own never wait for each other.
            texts_engine = load_onnx_classifier(engine_export, threads=1, calls=_cores())
        for served in served_versions(path, texts_engine=texts_engine, **batching):
            _warm_up(served)
            core.add(served)
    check_version_labels(options.version_labels, list(core.versions))
    core.version_labels = dict(options.version_labels)
    return base


def _cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose SIGTERM (or Ctrl-C) drains: no new connections or requests
    (`ModelServer.drain`), the ones in progress finish, then `serve` returns and the process
    exits 0 (uvicorn would re-raise the signal after its drain: exit 143)."""

    def __init__(self, config, model_server: ModelServer):
        super().__init__(config)
        self.model_server = model_server
        self.loop = asyncio.get_running_loop()

    def handle_exit(self, sig, frame) -> None:
        first = not self.should_exit
        super().handle_exit(sig, frame)
        self._captured_signals.clear()  # a drained server exits 0
        if first:
            self.loop.call_soon_threadsafe(self.model_server.drain)


def read_deadline_protocol(read_timeout: float):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request headers have not all
    arrived `read_timeout` seconds after it opened or after its last answer (uvicorn waits
    for them forever: a client that sends half its headers would hold the connection). The
    body's own deadline is `ModelServer._body`'s, which answers 408."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ReadDeadlineProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            self._arm()  # before: a pipelined request handled in there disarms it
            super().on_response_complete()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:  # the headers are in
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(read_timeout, self._close)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _close(self) -> None:
            if not self.transport.is_closing():
                self.transport.close()

    return ReadDeadlineProtocol


def _import_grpc() -> None:
    """Imports `bertfit.serve.grpc`, or raises a `MissingDependencyError` naming what to
    install."""
    try:
        import bertfit.serve.grpc  # noqa: F401
    except ModuleNotFoundError as e:
        raise MissingDependencyError(
            f"the gRPC API needs {e.name}: pip install 'bertfit[serve]' (grpcio and "
            "tensorflow-serving-api), or serve REST only with --grpc-port -1"
        ) from None
