"""Who gets in: `bertfit serve`'s API key, its admin key, and its TLS certificate.

- `--api-key KEY` (or `--api-key-file FILE`): every REST request must carry
  `Authorization: Bearer KEY` and every gRPC call the metadata `authorization: Bearer KEY`,
  status, metadata and metrics included (a CORS preflight, which browsers send without
  credentials, excepted). Without it: 401 `{"error": "Unauthorized"}` (vLLM's body for its
  `--api-key`) / UNAUTHENTICATED, saying nothing about the model.
- `--admin-key KEY` (or `--admin-key-file FILE`): ModelService.HandleReloadConfigRequest
  (which changes what is served) needs `authorization: Bearer ADMIN_KEY` instead. Without an
  admin key, a reload is taken only from this machine (a loopback or Unix socket peer; with
  the API key if there is one): from another one it is PERMISSION_DENIED.
- `--tls-cert` / `--tls-key`: both APIs speak TLS with that PEM pair.

Keys are kept as their SHA-256 digests (nothing prints one, not even this object's repr) and
compared with `hmac.compare_digest`, in time that does not depend on where they differ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import ssl
from pathlib import Path

from starlette.responses import JSONResponse

from bertfit.errors import ConfigError

UNAUTHENTICATED = "UNAUTHENTICATED"
PERMISSION_DENIED = "PERMISSION_DENIED"


def _digest(key: str | None) -> bytes | None:
    return None if key is None else hashlib.sha256(key.strip().encode("utf-8")).digest()


@dataclasses.dataclass(frozen=True)
class Access:
    """The keys a server asks for (their digests; None: not asked).

    Examples:
    >>> access = Access(api_key=_digest("s3cret"))
    >>> access.refusal("Bearer s3cret"), access.refusal("Bearer guess"), access.refusal(None)
    (None, 'UNAUTHENTICATED', 'UNAUTHENTICATED')
    >>> access.reload_refusal("Bearer s3cret", "ipv4:10.1.2.3:5000")
    'PERMISSION_DENIED'
    """

    api_key: bytes | None = None
    admin_key: bytes | None = None

    @classmethod
    def of(cls, options) -> Access:
        """The access `ServeOptions` ask for (the key file read now: a `ConfigError` if it
        cannot be)."""
        api_key, admin_key = options.api_key, options.admin_key
        if options.api_key_file is not None:
            api_key = read_key(options.api_key_file, "--api-key-file")
        if options.admin_key_file is not None:
            admin_key = read_key(options.admin_key_file, "--admin-key-file")
        return cls(_digest(api_key), _digest(admin_key))

    def refusal(self, authorization: str | None) -> str | None:
        """UNAUTHENTICATED unless `authorization` (the header or metadata) carries the API key
        (or none is asked for); else None."""
        if self.api_key is None or _carries(authorization, self.api_key):
            return None
        return UNAUTHENTICATED

    def reload_refusal(self, authorization: str | None, peer: str) -> str | None:
        """Why a config reload from gRPC `peer` ("ipv4:127.0.0.1:5000") is refused, or None."""
        if self.admin_key is not None:
            return None if _carries(authorization, self.admin_key) else UNAUTHENTICATED
        return self.refusal(authorization) or (None if is_local(peer) else PERMISSION_DENIED)


def _carries(authorization: str | None, digest: bytes) -> bool:
    """Whether `authorization` is "Bearer KEY" (the scheme in any case) for the key of `digest`."""
    scheme, _, key = (authorization or "").partition(" ")
    given = hashlib.sha256(key.strip().encode("utf-8", "surrogateescape")).digest()
    return hmac.compare_digest(given, digest) and scheme.lower() == "bearer"


def is_local(peer: str) -> bool:
    """Whether a gRPC peer ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "unix:...") is this
    machine.

    >>> is_local("ipv4:127.0.0.1:1"), is_local("ipv6:[::1]:1"), is_local("ipv4:192.168.0.2:1")
    (True, True, False)
    """
    kind, _, address = peer.partition(":")
    if kind == "unix":
        return True
    host = address.rpartition(":")[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or ip).is_loopback


def read_key(path: str, flag: str) -> str:
    """The key in file `path` (surrounding whitespace dropped), or a `ConfigError` naming
    `flag`."""
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{flag} {path}: cannot read it ({e})") from None
    if not key:
        raise ConfigError(f"{flag} {path} is empty: write the key in it")
    return key


def tls_pair(cert: str | None, key: str | None) -> tuple[bytes, bytes] | None:
    """(certificate chain, private key) in PEM from `--tls-cert` and `--tls-key` (checked to
    be a pair TLS can serve with: a `ConfigError` if not), or None without them."""
    if cert is None:
        return None
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        return Path(cert).read_bytes(), Path(key).read_bytes()
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"--tls-cert {cert} --tls-key {key}: not a PEM certificate and its private key "
            f"({e}); e.g. openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out "
            "cert.pem -subj /CN=localhost"
        ) from None


class RequireKey:
    """ASGI middleware answering 401 to an HTTP request without the API key (a CORS
    preflight, OPTIONS, passes: browsers send it without credentials)."""

    def __init__(self, app, access: Access, headers: dict | None = None):
        self.app = app
        self.access = access
        self.headers = {"WWW-Authenticate": "Bearer", **(headers or {})}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] != "OPTIONS":
            authorization = next(
                (v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None
            )
            if self.access.refusal(authorization) is not None:
                refusal = JSONResponse({"error": "Unauthorized"}, 401, headers=self.headers)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
