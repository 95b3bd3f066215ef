"""Who gets in: `--api-key` on every REST path and gRPC call, `--admin-key` (or loopback only)
for a config reload, refusals that say nothing about the model, keys never printed, and TLS."""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import ssl
import urllib.error
import urllib.request

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from bertfit.errors import ConfigError
from bertfit.serve.app import ModelServer
from bertfit.serve.options import ServeOptions
from bertfit.serve.security import Access, _digest
from tests.serve.asgi import exchange, serving
from tests.serve.conftest import lines_until, start_serve
from tests.serve.test_grpc import LiveServer

KEY, ADMIN_KEY = "k3y-for-tests", "adm1n-key-for-tests"
UNAUTHORIZED = (401, {"error": "Unauthorized"})


def test_the_keys_are_checked_before_anything_is_served(tmp_path):
    assert KEY not in repr(ServeOptions(api_key=KEY, admin_key=KEY))
    (tmp_path / "key").write_text(f"{KEY}\n")
    (tmp_path / "empty").write_text("\n")
    access = Access.of(ServeOptions(api_key_file=str(tmp_path / "key"), admin_key=KEY))
    assert access == Access(_digest(KEY), _digest(KEY))
    assert Access.of(ServeOptions(admin_key_file=str(tmp_path / "key"))).admin_key == _digest(KEY)
    for options, message in [
        ({"api_key": KEY, "api_key_file": "f"}, "--api-key and --api-key-file both give"),
        ({"admin_key": KEY, "admin_key_file": "f"}, "--admin-key and --admin-key-file both"),
        ({"api_key": " "}, "--api-key is empty"),
        ({"tls_cert": "cert.pem"}, "--tls-cert and --tls-key come together"),
    ]:
        with pytest.raises(ConfigError, match=message):
            ServeOptions(**options)
    for name, message in [("empty", "is empty: write the key in it"), ("nowhere", "cannot read")]:
        with pytest.raises(ConfigError, match=message):
            Access.of(ServeOptions(api_key_file=str(tmp_path / name)))


def test_a_reload_needs_the_admin_key_or_a_peer_on_this_machine():
    admin = Access(api_key=_digest(KEY), admin_key=_digest(ADMIN_KEY))
    assert admin.reload_refusal(f"Bearer {ADMIN_KEY}", "ipv4:10.0.0.7:4000") is None
    assert admin.reload_refusal(f"Bearer {KEY}", "ipv4:127.0.0.1:4000") == "UNAUTHENTICATED"
    keyed = Access(api_key=_digest(KEY))  # no admin key: this machine only
    for peer in ("ipv4:127.0.0.1:1", "ipv6:[::1]:1", "ipv6:[::ffff:127.0.0.1]:1", "unix:/s"):
        assert keyed.reload_refusal(f"Bearer {KEY}", peer) is None, peer
    for peer in ("ipv4:10.0.0.7:1", "ipv6:[2001:db8::1]:1", "ipv6:[::ffff:10.0.0.7]:1"):
        assert keyed.reload_refusal(f"Bearer {KEY}", peer) == "PERMISSION_DENIED", peer
    assert keyed.reload_refusal("Bearer guess", "ipv4:127.0.0.1:1") == "UNAUTHENTICATED"
    assert Access().reload_refusal(None, "ipv4:10.0.0.7:1") == "PERMISSION_DENIED"


def test_every_rest_path_is_401_without_the_key(text_classifier):
    server = ModelServer(text_classifier, "sst", api_key=KEY)
    requests = [
        ("GET", "/v1/models/sst", None),
        ("GET", "/v1/models/sst/metadata", None),
        ("POST", "/v1/models/sst:predict", {"instances": ["fun"]}),
        ("POST", "/classify", {"input": "fun"}),
        ("POST", "/predict", {"inputs": "fun"}),
        ("GET", "/healthz", None),
        ("GET", "/monitoring/prometheus/metrics", None),
        ("GET", "/no/such/path", None),
    ]
    wrong = [None, "Bearer guess", f"Basic {KEY}", KEY, f"Bearer {KEY}x"]

    async def scenario(app):
        refused, taken = [], []
        for method, path, body in requests:
            for authorization in wrong:
                headers = {"Authorization": authorization} if authorization else {}
                status, answer_headers, text = await exchange(app, method, path, body, headers)
                refused.append((status, json.loads(text), answer_headers["www-authenticate"]))
            headers = {"authorization": f"bearer {KEY}"}  # the scheme in any case
            taken.append((await exchange(app, method, path, body, headers))[0])
        preflight = await exchange(app, "OPTIONS", "/v1/models/sst", None, {"Origin": "http://a"})
        return refused, taken, preflight[0]

    refused, taken, preflight = serving(server, scenario)
    assert len(refused) == 40 and all(r == (*UNAUTHORIZED, "Bearer") for r in refused)
    assert taken == [200, 200, 200, 200, 200, 200, 200, 404]
    assert preflight == 200  # browsers send a CORS preflight without credentials


@pytest.fixture(scope="module")
def keyed_live(text_classifier):
    """The in-memory classifier served as "sst" with an API key and an admin key, its gRPC
    server on a free port of 127.0.0.1."""
    live = LiveServer(ModelServer(text_classifier, "sst", api_key=KEY, admin_key=ADMIN_KEY))
    yield live
    live.close()


def _code(method, request, key: str | None = None):
    """The status code of a gRPC call with `key` as its bearer."""
    metadata = [("authorization", f"Bearer {key}")] if key else []
    try:
        method(request, metadata=metadata, timeout=30)
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def test_every_grpc_call_is_unauthenticated_without_the_key(keyed_live):
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "sst"
    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = "sst"
    predict.inputs["text"].CopyFrom(tf.make_tensor_proto(["fun"]))
    reload = model_management_pb2.ReloadConfigRequest()
    reload.config.model_config_list.config.add(
        name="sst", model_platform="tensorflow", base_path="/models/sst"
    )
    calls = [
        keyed_live.models.GetModelStatus,
        keyed_live.predictions.Predict,
        keyed_live.models.HandleReloadConfigRequest,
    ]
    refused = grpc.StatusCode.UNAUTHENTICATED, "Unauthorized"
    for call, request in zip(calls, [status, predict, reload], strict=True):
        assert _code(call, request) == refused
        assert _code(call, request, "guess") == refused
    assert _code(calls[0], status, KEY)[0] == grpc.StatusCode.OK
    assert _code(calls[1], predict, KEY)[0] == grpc.StatusCode.OK
    assert _code(calls[2], reload, KEY) == refused  # a reload takes the admin key only
    # Let in: it fails on what it asks (this server polls no export), not on who asks.
    assert _code(calls[2], reload, ADMIN_KEY)[0] == grpc.StatusCode.FAILED_PRECONDITION


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and localhost, and its key, in PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return folder / "cert.pem", folder / "key.pem"


@pytest.mark.slow
def test_bertfit_serve_with_keys_and_tls(trained_run, tls_pair, tmp_path):
    """The CLI end to end (about 15 s: the one server process here): https and gRPC over TLS,
    401 / UNAUTHENTICATED without the key, answers with it, and neither key in its output."""
    cert, key = tls_pair
    (tmp_path / "api-key").write_text(KEY + "\n")
    process = start_serve(
        *("--run", trained_run[1].run_dir, "--port", "0", "--model-name", "sst"),
        *("--api-key-file", str(tmp_path / "api-key"), "--admin-key", ADMIN_KEY),  # printed?
        *("--tls-cert", str(cert), "--tls-key", str(key)),
    )
    try:
        lines = lines_until(process, "API key", timeout=180)
        url = re.search(r" on (https://\S+?)/v1/models/", lines[0])[1]
        grpc_port = int(re.search(r"over TLS on 127\.0\.0\.1:(\d+)$", lines[1])[1])
        context = ssl.create_default_context(cafile=str(cert))

        def rest(path: str, body: dict, authorization: str | None = None):
            headers = {"Authorization": authorization} if authorization else {}
            request = urllib.request.Request(url + path, json.dumps(body).encode(), headers)
            try:
                with urllib.request.urlopen(request, timeout=60, context=context) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        assert rest("/predict", {"inputs": "fun"}) == UNAUTHORIZED
        status, ranked = rest("/predict", {"inputs": "fun"}, f"Bearer {KEY}")
        assert status == 200 and {p["label"] for p in ranked} == {"neg", "pos"}

        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", credentials) as channel:
            models = model_service_pb2_grpc.ModelServiceStub(channel)
            predictions = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            request = get_model_status_pb2.GetModelStatusRequest()
            request.model_spec.name = "sst"
            assert _code(models.GetModelStatus, request)[0] == grpc.StatusCode.UNAUTHENTICATED
            assert _code(models.GetModelStatus, request, KEY)[0] == grpc.StatusCode.OK
            predict = predict_pb2.PredictRequest()
            predict.model_spec.name = "sst"
            predict.inputs["text"].CopyFrom(tf.make_tensor_proto(["fun"]))
            assert _code(predictions.Predict, predict, KEY)[0] == grpc.StatusCode.OK
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
    printed = "\n".join(lines) + out + err
    assert KEY not in printed and ADMIN_KEY not in printed
