"""Regenerates bertfit/text/sentencepiece_model_pb2.py from sentencepiece_model.proto.

A generated module refuses, at import, a protobuf runtime older than the protoc that wrote it,
so it is written by the protoc of the oldest protobuf bertfit supports: TensorFlow 2.20's
(its own generated modules need protobuf 5.28.3; TensorFlow 2.21's need 6.31.1 and below 8).
grpcio-tools 1.68.1 bundles protoc 28.1, whose Python code asks for protobuf 5.28.1 or newer
(protobuf 6 runtimes warn that it is a major version older; bertfit.text.sentencepiece quiets
that warning). grpcio-tools 1.68 requires protobuf below 6, so it runs in a venv of its own:

    python3 -m venv /tmp/protoc && /tmp/protoc/bin/pip install grpcio-tools==1.68.1
    /tmp/protoc/bin/python scripts/generate_protos.py           # rewrites the module
    /tmp/protoc/bin/python scripts/generate_protos.py --check   # exit 1 if it differs

tests/text/test_sentencepiece_proto.py checks, without protoc, that the module declares what
the .proto does.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ["bertfit/text/sentencepiece_model.proto"]
GRPCIO_TOOLS = "1.68.1"


def generate(proto: str, out: Path) -> Path:
    """Runs protoc on `proto` (a path from the repository root) into `out`; returns the module."""
    from grpc_tools import protoc

    status = protoc.main(["protoc", f"--proto_path={ROOT}", f"--python_out={out}", proto])
    if status != 0:
        sys.exit(f"protoc failed on {proto} (exit {status})")
    return out / proto.replace(".proto", "_pb2.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    check = parser.parse_args().check
    if version("grpcio-tools") != GRPCIO_TOOLS:
        sys.exit(
            f"needs grpcio-tools=={GRPCIO_TOOLS} (found {version('grpcio-tools')}): see --help"
        )
    stale = []
    with tempfile.TemporaryDirectory() as out:
        for proto in PROTOS:
            fresh = generate(proto, Path(out)).read_bytes()
            module = ROOT / proto.replace(".proto", "_pb2.py")
            if module.exists() and module.read_bytes() == fresh:
                continue
            stale.append(module.relative_to(ROOT))
            if not check:
                module.write_bytes(fresh)
    verb = "differs from its .proto" if check else "written"
    for module in stale:
        print(f"{module}: {verb}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
