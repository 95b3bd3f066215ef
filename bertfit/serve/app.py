"""The HTTP server: Starlette (routing, requests) on uvicorn (the ASGI server).

Why these: uvicorn is the maintained, production ASGI server most Python services run on, and
Starlette is the small ASGI toolkit under FastAPI; together they give an asyncio event loop, so
dynamic batching needs no threads besides the one that runs TensorFlow.

    GET  /healthz
    GET  /v1/models/NAME[/versions/V]             model status
    GET  /v1/models/NAME[/versions/V]/metadata    signatures
    POST /v1/models/NAME[/versions/V]:predict     {"instances": [...]} or {"inputs": ...}
"""

from __future__ import annotations

import contextlib
import re

import numpy as np
import tensorflow as tf
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bertfit.predictor import Classifier
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
        self.classifier = classifier
        self.model_name = model_name
        self.version = version
        self.max_request_instances = max_request_instances
        self.max_body_bytes = max_body_bytes
        self.functions = classifier.signatures()
        self.signatures = {name: Signature.of(name, f) for name, f in self.functions.items()}
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
            return JSONResponse({"error": str(e)}, status_code=e.status)

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
        request = parse_predict(body, self.signatures, self.max_request_instances)
        if request.signature.name == "serving_default":
            outputs = await self.batcher.submit(request.rows)
        else:
            outputs = await self._call_directly(request)
        return format_predict(request, outputs)

    async def _call_directly(self, request) -> list[dict]:
        names = list(request.signature.inputs)
        lengths = {len(row[names[0]]) for row in request.rows}
        if len(lengths) != 1 or any(
            len(row[n]) not in lengths for row in request.rows for n in names
        ):
            raise RequestError(
                "every instance's id lists must have the same length (pad them with input_mask 0)"
            )
        inputs = {n: tf.constant([row[n] for row in request.rows], tf.int32) for n in names}
        function = self.functions[request.signature.name]
        result = await self.batcher.run_alone(lambda: function(**inputs))
        return _rows({k: v.numpy() for k, v in result.items()})

    def _classify_texts(self, rows: list[dict]) -> list[dict]:
        texts = [row["text"] for row in rows]
        pairs = [row["text_pair"] for row in rows] if self.classifier.pairs else None
        return _rows(self.classifier.outputs(texts, pairs))


def _rows(outputs: dict[str, np.ndarray]) -> list[dict]:
    """{name: [batch, ...]} → one {name: value} per row."""
    size = len(next(iter(outputs.values())))
    return [{name: values[i] for name, values in outputs.items()} for i in range(size)]


def serve(
    path: str, host: str = "127.0.0.1", port: int = 8501, model_name: str = "model", **options
) -> None:
    """Loads the classifier at `path` (a run directory or an export) and serves it until
    interrupted."""
    import uvicorn

    from bertfit.predictor import load_classifier

    classifier = load_classifier(path)
    version = str(classifier.metadata.get("version", 1))
    server = ModelServer(classifier, model_name, version, **options)
    classifier.outputs(["warm up"], ["warm up"] if classifier.pairs else None)
    print(
        f"bertfit serve: {path} as model {model_name!r} version {version} on "
        f"http://{host}:{port}/v1/models/{model_name}",
        flush=True,
    )
    uvicorn.run(server.app(), host=host, port=port, log_level="warning")
