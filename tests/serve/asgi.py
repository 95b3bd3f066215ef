"""Speaking HTTP to an ASGI app in-process (no sockets, no httpx): what the server tests need."""

from __future__ import annotations

import asyncio
import json


async def call(app, path: str, body: bytes | dict | None = None) -> tuple[int, object]:
    """(status, JSON body) of one request: GET without a body, POST with one (a dict is sent
    as JSON, bytes as they are). A body that is not JSON comes back as bytes."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET" if body is None else "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogatepass"),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8501),
    }
    messages = [{"type": "http.request", "body": body or b"", "more_body": False}]
    sent: list[dict] = []

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the client stays connected

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    status = sent[0]["status"]
    data = b"".join(m.get("body", b"") for m in sent[1:])
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def serving(server, scenario):
    """Runs `await scenario(app)` with `server`'s app started (its batcher running), in a new
    event loop; returns what the scenario returns."""

    async def main():
        app = server.app()
        async with app.router.lifespan_context(app):
            return await scenario(app)

    return asyncio.run(main())


async def exchange(
    app, method: str, path: str, body: bytes | dict | None = None, headers: dict | None = None
) -> tuple[int, dict, bytes]:
    """(status, headers, raw body) of one request with any method and headers."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogatepass"),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8501),
    }
    messages = [{"type": "http.request", "body": body or b"", "more_body": False}]
    sent: list[dict] = []

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    answer_headers = {k.decode().lower(): v.decode() for k, v in sent[0].get("headers", [])}
    return sent[0]["status"], answer_headers, b"".join(m.get("body", b"") for m in sent[1:])
