"""Files behind URLs: `gs://`, `s3://`, TensorFlow's `ram://` and whatever else fsspec or
`tf.io.gfile` reads, with the few operations bertfit needs. Local paths never come here.

Which library serves a URL:

- fsspec (gcsfs for `gs://`, s3fs for `s3://`, `memory://`, ...) for every protocol fsspec
  knows. It reaches emulators and S3-compatible servers (`STORAGE_EMULATOR_HOST`,
  `AWS_ENDPOINT_URL`), which TensorFlow's own GCS file system cannot be pointed at, and TF 2.21
  has no `s3://` at all. Credentials and endpoints are fsspec's own settings: the usual cloud
  environment variables, or `FSSPEC_<PROTOCOL>_<OPTION>` (e.g. `FSSPEC_GS_TOKEN=anon`).
- `tf.io.gfile` for the schemes only TensorFlow knows (`ram://`, and file systems that TF
  plugins register).

gcsfs 2025+ probes every bucket for hierarchical-namespace features over gRPC, which stalls
about a minute per call against an emulator; bertfit turns that experiment off unless
`GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT` is set (the plain JSON API serves every bucket).

An object store has no rename and no append: `write_bytes` is one upload, which the store makes
visible whole or not at all, so a reader never sees half a file. `create_exclusive` writes only
if nothing is there (a generation/`If-None-Match` precondition), which the run lock uses.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path

from bertfit.errors import BertfitError, MissingDependencyError

_URL = re.compile(r"(?P<protocol>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)
_LIBRARIES = {"gs": "gcsfs", "gcs": "gcsfs", "s3": "s3fs", "s3a": "s3fs"}


class StorageError(BertfitError):
    """A URL bertfit cannot use: an unknown scheme, a client library that is missing, a store
    that refuses (a missing bucket, no permission)."""


@contextlib.contextmanager
def writes_said(url: str) -> Iterator[None]:
    """Turns what a store's client raises while writing under `url` (a missing bucket, no
    permission to write, the network: `FileNotFoundError`, `PermissionError`, botocore's and
    google's own errors) into one `StorageError` naming the URL, not a traceback."""
    try:
        yield
    except BertfitError:
        raise
    except Exception as e:
        raise StorageError(
            f"{path_text(url)}: cannot be written ({type(e).__name__}: {str(e)[:300]}); check "
            "that the bucket exists and that your credentials may write to it"
        ) from None


def is_url(path: str | os.PathLike | None) -> bool:
    """Whether `path` is a URL served here (not a local path; `file://` counts as local).

    Examples:
    >>> is_url("gs://bucket/train.csv"), is_url("data/train.csv"), is_url("file:///tmp/a")
    (True, False, False)
    """
    if path is None or isinstance(path, Path):
        return False
    match = _URL.fullmatch(os.fspath(path))
    return match is not None and match["protocol"].lower() != "file"


def join(url: str, *parts: str) -> str:
    """`url` with `parts` appended, one `/` between each.

    Examples:
    >>> join("gs://bucket/runs/", "a", "checkpoints/latest")
    'gs://bucket/runs/a/checkpoints/latest'
    """
    return "/".join([url.rstrip("/"), *(p.strip("/") for p in parts if p)])


def name_of(url: str) -> str:
    """The last part of a URL, as `Path.name` is of a path.

    Examples:
    >>> name_of("s3://bucket/data/train.csv.gz")
    'train.csv.gz'
    """
    return url.rstrip("/").rpartition("/")[2]


# ---- the two backends ----


class _Fsspec:
    def __init__(self, protocol: str):
        import fsspec

        if protocol in ("gs", "gcs"):
            os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        try:
            self.fs = fsspec.filesystem(protocol)
        except ImportError:
            library = _LIBRARIES.get(protocol, f"the fsspec implementation of {protocol}://")
            raise MissingDependencyError(
                f"{protocol}:// paths need {library}: `pip install {library}` (or "
                "`pip install 'bertfit[storage]'`)."
            ) from None

    def read(self, url: str) -> bytes:
        return self.fs.cat_file(url)

    def open_read(self, url: str):
        return self.fs.open(url, "rb")

    def put(self, local: str, url: str) -> None:
        self.fs.put_file(local, url)

    def write(self, url: str, data: bytes) -> None:
        self.fs.pipe_file(url, data)

    def create_exclusive(self, url: str, data: bytes) -> bool:
        try:
            with self.fs.open(url, "xb") as f:
                f.write(data)
        except FileExistsError:
            return False
        return True

    def exists(self, url: str) -> bool:
        return self.fs.exists(url)

    def isdir(self, url: str) -> bool:
        return self.fs.isdir(url)

    def walk_files(self, url: str) -> list[str]:
        if not self.fs.isdir(url):
            return []
        self.fs.invalidate_cache(url)
        prefix = self.fs._strip_protocol(url).rstrip("/") + "/"
        found = self.fs.find(url)
        return sorted(p[len(prefix) :] for p in found if p.startswith(prefix))

    def glob(self, pattern: str) -> list[str]:
        protocol = pattern.partition("://")[0]
        return [f"{protocol}://{path}" for path in self.fs.glob(pattern)]

    def makedirs(self, url: str) -> None:
        self.fs.makedirs(url, exist_ok=True)

    def remove(self, url: str) -> None:
        self.fs.rm_file(url)


class _Gfile:
    def __init__(self, protocol: str):
        import tensorflow as tf

        self.gfile = tf.io.gfile
        self.errors = tf.errors

    def read(self, url: str) -> bytes:
        try:
            with self.gfile.GFile(url, "rb") as f:
                return f.read()
        except self.errors.NotFoundError:
            raise FileNotFoundError(url) from None
        except self.errors.InvalidArgumentError:
            if self.gfile.isdir(url):
                raise IsADirectoryError(url) from None
            raise

    def open_read(self, url: str):
        if not self.gfile.exists(url):
            raise FileNotFoundError(url)
        return io.BufferedReader(_GFileReader(self.gfile.GFile(url, "rb")))

    def put(self, local: str, url: str) -> None:
        temporary = f"{url}.{os.getpid()}.tmp"
        self.gfile.makedirs(url.rpartition("/")[0])
        self.gfile.copy(local, temporary, overwrite=True)
        self.gfile.rename(temporary, url, overwrite=True)

    def write(self, url: str, data: bytes) -> None:
        # Written beside, then renamed over: whole or absent (ram:// also keeps the tail of a
        # longer file that "wb" writes over).
        temporary = f"{url}.{os.getpid()}.tmp"
        self.gfile.makedirs(url.rpartition("/")[0])  # listed by walk only once made
        with self.gfile.GFile(temporary, "wb") as f:
            f.write(data)
        self.gfile.rename(temporary, url, overwrite=True)

    def create_exclusive(self, url: str, data: bytes) -> bool:
        if self.gfile.exists(url):  # no precondition in tf.io.gfile: check, then write
            return False
        self.write(url, data)
        return True

    def exists(self, url: str) -> bool:
        return self.gfile.exists(url)

    def isdir(self, url: str) -> bool:
        return self.gfile.isdir(url)

    def walk_files(self, url: str) -> list[str]:
        if not self.gfile.isdir(url):
            return []
        root, found = url.rstrip("/"), []
        for directory, _, files in self.gfile.walk(root):
            relative = directory[len(root) :].strip("/")
            found += [f"{relative}/{f}" if relative else f for f in files]
        return sorted(found)

    def glob(self, pattern: str) -> list[str]:
        return self.gfile.glob(pattern)

    def makedirs(self, url: str) -> None:
        self.gfile.makedirs(url)

    def remove(self, url: str) -> None:
        try:
            self.gfile.remove(url)
        except self.errors.NotFoundError:
            raise FileNotFoundError(url) from None


class _GFileReader(io.RawIOBase):
    """A `tf.io.gfile.GFile` as a standard binary stream (`io.TextIOWrapper`, gzip and
    pyarrow need `readable`, `readinto`, ...)."""

    def __init__(self, gfile):
        self._file = gfile

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._file.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._file.seek(offset, whence)
        return self._file.tell()

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
        super().close()


_backends: dict[str, _Fsspec | _Gfile] = {}


def _backend(url: str) -> _Fsspec | _Gfile:
    match = _URL.fullmatch(url)
    if match is None:
        raise StorageError(f"{url} is not a URL")
    protocol = match["protocol"].lower()
    if protocol not in _backends:
        from fsspec.registry import known_implementations, registry

        if protocol in known_implementations or protocol in registry:
            _backends[protocol] = _Fsspec(protocol)
        elif protocol in _tensorflow_schemes():
            _backends[protocol] = _Gfile(protocol)
        else:
            raise StorageError(
                f"{url}: no file system serves {protocol}:// (neither fsspec nor TensorFlow "
                "knows it); use a local path, gs://, s3:// or another fsspec protocol."
            )
    return _backends[protocol]


def _tensorflow_schemes() -> set[str]:
    try:
        import tensorflow as tf
    except ImportError:  # a JAX-only install: fsspec's protocols alone
        return set()
    try:
        return set(tf.io.gfile.get_registered_schemes())
    except AttributeError:  # older TensorFlow: the schemes it ships
        return {"ram", "gs", "hdfs"}


def reset() -> None:
    """Forgets the clients made so far (endpoints or credentials changed: tests)."""
    _backends.clear()
    try:
        from fsspec.spec import AbstractFileSystem

        AbstractFileSystem.clear_instance_cache()
    except ImportError:
        pass


# ---- the operations ----


def read_bytes(url: str) -> bytes:
    """The whole object at `url`.

    Raises:
        FileNotFoundError: no such object (or bucket).
        IsADirectoryError: a folder (tf.io.gfile schemes; an object store says not found).
        OSError: the store refused (permissions, network).
    """
    return _backend(url).read(url)


def write_bytes(url: str, data: bytes) -> None:
    """Writes `data` to `url` in one upload: readers see the old object or the new one whole."""
    _backend(url).write(url, data)


def write_text(url: str, text: str) -> None:
    write_bytes(url, text.encode("utf-8"))


def create_exclusive(url: str, data: bytes) -> bool:
    """Writes `data` to `url` only if no object is there; False when one was. Atomic on GCS
    (`ifGenerationMatch=0`) and S3 (`If-None-Match: *`); `tf.io.gfile` schemes check first."""
    return _backend(url).create_exclusive(url, data)


def exists(url: str) -> bool:
    return _backend(url).exists(url)


def isdir(url: str) -> bool:
    """Whether objects lie under `url/` (a "folder" on an object store)."""
    return _backend(url).isdir(url)


def list_files(url: str) -> list[str]:
    """Every file under `url`, as sorted paths relative to it ("checkpoints/best/x.safetensors");
    [] when there is none."""
    return _backend(url).walk_files(url)


def glob(pattern: str) -> list[str]:
    """The URLs of the objects that `pattern` (`gs://bucket/data/train-*.csv`) matches, sorted."""
    return sorted(_backend(pattern).glob(pattern))


def makedirs(url: str) -> None:
    _backend(url).makedirs(url)


def remove(url: str) -> None:
    _backend(url).remove(url)


def open_read(url: str):
    """The object at `url` as a binary file open for reading, streamed (not read whole).

    Raises:
        FileNotFoundError: no such object (or bucket).
    """
    return _backend(url).open_read(url)


def put_file(local: str | os.PathLike, url: str) -> None:
    """Streams a local file to `url` without reading it into memory. The object appears whole
    or not at all: one upload (GCS's resumable and S3's multipart uploads show the object only
    when they complete); on `tf.io.gfile` schemes a copy beside, renamed over."""
    _backend(url).put(os.fspath(local), url)


def tensorflow_reads(url: str) -> bool:
    """Whether TensorFlow's own file systems (`tf.io.gfile`, `tf.data.TFRecordDataset`) read
    `url`'s scheme: `gs://`, `ram://` and those of TF plugins do; TF 2.21 has no `s3://`.

    Examples:
    >>> tensorflow_reads("ram://prepared"), tensorflow_reads("s3://bucket/prepared")
    (True, False)
    """
    match = _URL.fullmatch(os.fspath(url))
    return match is None or match["protocol"].lower() in _tensorflow_schemes()


def upload_file(local: str | os.PathLike, url: str) -> None:
    """Copies a local file to `url` (one upload: whole or absent)."""
    write_bytes(url, Path(local).read_bytes())


def download_tree(url: str, local: str | os.PathLike, skip=lambda relative: False) -> list[str]:
    """Copies every file under `url` into the local folder `local` (made when needed), except
    those whose relative path `skip` is true of; returns the relative paths copied."""
    copied = []
    for relative in list_files(url):
        if skip(relative):
            continue
        target = Path(local, relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(read_bytes(join(url, relative)))
        copied.append(relative)
    return copied


def path_text(path: str | os.PathLike) -> str:
    """A path as text: a URL as given (less a trailing `/`), a local path as `Path` writes it.

    Examples:
    >>> path_text("gs://bucket/runs/a/"), path_text("runs//a/")
    ('gs://bucket/runs/a', 'runs/a')
    """
    return os.fspath(path).rstrip("/") if is_url(path) else str(Path(path))
