"""Model versions as TF Serving handles them: an export's BASE folder polled for numbered
versions, loaded and unloaded as a version policy says, each with TF Serving's states.

TF Serving (`sources/storage_path/file_system_storage_path_source.cc`,
`core/aspired_versions_manager.cc`, `core/availability_preserving_policy.cc`):

- every `--file-system-poll-wait-seconds` (default 1; 0: once at start) BASE is listed; a version
  is anything in it named by a number (bertfit's export writes a version beside its final name
  and renames it into place, so a version being written is never seen half-way; a numbered
  folder without `saved_model.pb` is a version that fails to load, NOT_FOUND);
- the version policy (`file_system_storage_path_source.proto` ServableVersionPolicy) says which
  of them to serve: `latest:N` (the N highest, default 1), `all`, or `specific:1,3`;
- a new version is loaded (START, LOADING, AVAILABLE) while the others keep serving; a version
  the policy no longer wants is unloaded (UNLOADING, END) only once a wanted version is
  AVAILABLE, and after the requests it holds have finished: a version that fails to load is
  END with the loader's status (`load_status`: TensorFlow's code and message) and never
  replaces a working one. TF Serving tries a load 5 times a minute apart (`server_core.h`
  max_num_load_retries, load_retry_interval_micros), LOADING meanwhile, and then leaves it
  END; bertfit tries once, so the version is END at once with the same status, and tries it
  again whenever its folder changes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import tensorflow as tf

from bertfit.errors import ConfigError
from bertfit.serve.core import (
    AVAILABLE,
    END,
    LOADING,
    START,
    UNLOADING,
    ModelCore,
    ServedVersion,
    ServingError,
    VersionState,
)


@dataclasses.dataclass(frozen=True)
class VersionPolicy:
    """Which of the versions on disk to serve (TF Serving's ServableVersionPolicy)."""

    kind: str = "latest"  # "latest", "all" or "specific"
    count: int = 1  # for "latest"
    versions: tuple[int, ...] = ()  # for "specific"

    @classmethod
    def parse(cls, text: str) -> VersionPolicy:
        """`latest`, `latest:N`, `all` or `specific:V[,V...]` (`--version-policy`)."""
        kind, _, rest = text.strip().partition(":")
        try:
            if kind == "latest":
                policy = cls("latest", int(rest) if rest else 1)
            elif kind == "all" and not rest:
                policy = cls("all")
            elif kind == "specific":
                policy = cls("specific", versions=tuple(sorted({int(v) for v in rest.split(",")})))
            else:
                raise ValueError
        except ValueError:
            policy = None
        if policy is None or policy.count < 1 or any(v < 0 for v in policy.versions):
            raise ConfigError(
                f"--version-policy {text!r} is not a version policy; use latest (the newest "
                "version), latest:N (the N newest), all, or specific:1,3 (those versions)"
            )
        return policy

    @classmethod
    def from_proto(cls, proto) -> VersionPolicy:
        """From a ModelConfig's `model_version_policy` (unset: latest 1, TF Serving's default)."""
        choice = proto.WhichOneof("policy_choice")
        if choice == "all":
            return cls("all")
        if choice == "specific":
            versions = tuple(sorted(set(proto.specific.versions)))
            if not versions:
                raise ServingError("a specific version policy must name at least one version")
            if versions[0] < 0:
                raise ServingError(
                    f"a specific version policy names version {versions[0]}; versions are "
                    "numbers from 0 (the version folders' names)"
                )
            return cls("specific", versions=versions)
        count = proto.latest.num_versions if choice == "latest" else 1
        return cls("latest", max(1, count))

    def aspired(self, on_disk: list[int]) -> set[int]:
        """The versions of `on_disk` to serve."""
        if self.kind == "all":
            return set(on_disk)
        if self.kind == "specific":
            return set(on_disk) & set(self.versions)
        return set(sorted(on_disk)[-self.count :])

    def __str__(self) -> str:
        if self.kind == "latest":
            return f"latest:{self.count}"
        return "all" if self.kind == "all" else "specific:" + ",".join(map(str, self.versions))


def version_folders(base: Path) -> dict[int, Path]:
    """BASE's versions: whatever it holds named by a number, as TF Serving's source lists
    them (`file_system_storage_path_source.cc` ParseVersionNumber: one without
    `saved_model.pb` is a version too, which fails to load NOT_FOUND)."""
    try:
        entries = list(base.iterdir())
    except OSError:
        return {}
    return {int(p.name): p for p in entries if p.name.isdigit()}


def load_status(error: Exception) -> tuple[str, str]:
    """(status code name, message) of a version that failed to load with `error`, as TF
    Serving reports the loader's status: TensorFlow's own code (NOT_FOUND for a folder
    without saved_model.pb, DATA_LOSS for one that does not parse, ...), UNKNOWN for an error
    TensorFlow gives no code."""
    if isinstance(error, ServingError):
        return error.code, error.message
    if isinstance(error, tf.errors.OpError):
        return _CODE_NAMES[error.error_code], error.message
    return "UNKNOWN", f"{type(error).__name__}: {error}"


# absl::StatusCode's names by number (tf.errors' codes are the same numbers).
_CODE_NAMES = (
    "OK CANCELLED UNKNOWN INVALID_ARGUMENT DEADLINE_EXCEEDED NOT_FOUND ALREADY_EXISTS "
    "PERMISSION_DENIED RESOURCE_EXHAUSTED FAILED_PRECONDITION ABORTED OUT_OF_RANGE "
    "UNIMPLEMENTED INTERNAL UNAVAILABLE DATA_LOSS UNAUTHENTICATED"
).split()


def _fingerprint(folder: Path) -> tuple:
    """What changes when a version folder's files change (a failed version is retried then)."""
    try:
        return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in folder.rglob("*")))
    except OSError:
        return ()


class VersionManager:
    """Keeps the versions `policy` wants from `base` loaded in `core`, polling every
    `poll_wait` seconds (0: only at start).

    Args:
        core: the `ModelCore` that serves them (its `versions` and `states`).
        base: the export's BASE folder (`bertfit export --run RUN BASE`).
        policy: which versions to serve.
        load: folder → a loaded, warmed-up `ServedVersion` (runs in a thread).
        poll_wait: seconds between polls.
    """

    def __init__(
        self,
        core: ModelCore,
        base: str | Path,
        policy: VersionPolicy,
        load: Callable[[int, Path], ServedVersion],
        poll_wait: float,
    ):
        self.core = core
        self.base = Path(base)
        self.policy = policy
        self.load = load
        self.poll_wait = poll_wait
        self.failed: dict[int, tuple] = {}  # version → the fingerprint of its folder that failed
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        core.manager = self

    # ---- at start, before the event loop serves ----

    def load_initial(self) -> None:
        """Loads the versions the policy wants, synchronously; a `ConfigError` when none
        loads (the errors said), as TF Serving will not start without its model."""
        wanted = self._wanted(self.policy)
        for number in sorted(wanted):
            self._record(number, START)
            served = self._try_load(number, wanted[number])
            if served is not None:
                self.core.add(served)
                self._record(number, AVAILABLE)
        if not self.core.versions:
            reasons = "; ".join(
                f"version {n}: {s.error_message}" for n, s in self.core.states.items()
            )
            raise ConfigError(
                f"{self.base}: no version could be loaded ({reasons or 'it has no version'}); "
                "export one with `bertfit export --run RUN BASE`"
            )

    # ---- while serving ----

    def start(self) -> None:
        if self.poll_wait > 0:
            self._task = asyncio.get_running_loop().create_task(self._poll_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_wait)
            await self.poll()

    async def poll(self) -> None:
        """One poll: load what the policy wants and is not loaded, then unload what it no
        longer wants once a wanted version is AVAILABLE."""
        async with self._lock:
            wanted = self._wanted(self.policy)
            await self._load(wanted)
            await self._unload_unwanted(wanted)

    async def reload(self, policy: VersionPolicy, labels: dict[str, int]) -> None:
        """HandleReloadConfigRequest's new policy and labels (whose versions the caller has
        checked are AVAILABLE, as TF Serving does). A label on a version the new policy would
        unload is refused before anything changes (TF Serving would unload it and leave the
        label naming nothing); else the versions the policy adds are loaded, those it drops
        unloaded, and the labels kept.

        Raises:
            ServingError: FAILED_PRECONDITION, naming the first such label.
        """
        async with self._lock:
            wanted = self._wanted(policy)
            for label, version in labels.items():
                if version not in wanted:
                    raise ServingError(
                        f"the label {label} names version {version} of model "
                        f"{self.core.model_name}, which the version policy {policy} would "
                        "unload; keep that version in the policy, or label another",
                        "FAILED_PRECONDITION",
                    )
            self.policy = policy
            await self._load(wanted)
            await self._unload_unwanted(wanted)
            self.core.version_labels = dict(labels)

    def _wanted(self, policy: VersionPolicy) -> dict[int, Path]:
        folders = version_folders(self.base)
        return {n: folders[n] for n in policy.aspired(list(folders))}

    async def _load(self, wanted: dict[int, Path]) -> None:
        """Loads the `wanted` versions not serving yet, newest first (one that failed as its
        folder is now waits for it to change)."""
        for number in sorted(set(wanted) - set(self.core.versions), reverse=True):
            if self.failed.get(number) == _fingerprint(wanted[number]):
                continue  # failed as it is: wait for it to change
            self._record(number, START)
            served = await asyncio.to_thread(self._try_load, number, wanted[number])
            if served is not None:
                served.batcher.start()
                self.core.add(served)
                self._record(number, AVAILABLE)

    async def _unload_unwanted(self, wanted: dict[int, Path]) -> None:
        """Unloads the serving versions not `wanted`, once a wanted one is AVAILABLE (until
        then what serves keeps serving: availability preserving)."""
        if not set(wanted) & set(self.core.versions):
            return
        for number in sorted(set(self.core.versions) - set(wanted)):
            await self._unload(number)

    def _try_load(self, number: int, folder: Path) -> ServedVersion | None:
        """The loaded version, or None with its state END and the error (and the attempt in
        TensorFlow's load metrics)."""
        self._record(number, LOADING)
        metrics = self.core.metrics
        started = time.monotonic()
        try:
            served = self.load(number, folder)
        except Exception as e:  # a user's folder can fail to load in any way: reported
            metrics.load_attempt_count.add(model_path=str(folder), status="fail")
            self.failed[number] = _fingerprint(folder)
            code, message = load_status(e)
            self._record(number, END, code, message[:2000])
            return None
        self.failed.pop(number, None)
        metrics.load_attempt_count.add(model_path=str(folder), status="success")
        microseconds = int((time.monotonic() - started) * 1e6)
        metrics.load_latency.add(microseconds, model_path=str(folder))
        return served

    async def _unload(self, number: int) -> None:
        """Stops routing requests to `number`, lets those it holds finish, then drops it."""
        served = self.core.versions[number]
        self._record(number, UNLOADING)
        self.core.remove(number)
        deadline = time.monotonic() + 60
        while served.batcher.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await served.batcher.stop()
        self._record(number, END)

    def _record(self, number: int, state: str, code: str = "OK", message: str = "") -> None:
        self.core.set_state(number, VersionState(state, code, message))
