"""Typing of the native module (crates/lock-py/src): what `fencedlock` re-exports."""

from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import ClassVar, Literal, final

from typing_extensions import LiteralString, TypeAlias

class LockServiceError(Exception):
    """Every error of the lock SDK."""

class ConfigError(LockServiceError):
    """The client's settings are unusable."""

class InvalidArgument(LockServiceError):
    """The service refused the caller's input (a resource: a header missing, repeated or
    malformed; a bad argument to the fence)."""

    code: ClassVar[str]
    """`INVALID_ARGUMENT`, as a resource sends it."""
    http_status: ClassVar[int]
    """400."""

class LockContended(LockServiceError):
    """Another session held the lock for the whole wait."""

class LockLost(LockServiceError):
    """The lock may be lost: stop writing under it."""

    key: str
    fencing_token: int
    reason: str
    detail: str | None

class ProofInvalid(LockServiceError):
    """A write's fencing proof does not prove a trusted grant of its key and token."""

    code: ClassVar[str]
    """`PROOF_INVALID`."""
    http_status: ClassVar[int]
    """403."""

class FencedOut(LockServiceError):
    """A fenced write's grant no longer holds the resource's fence: a newer grant claimed it."""

    code: ClassVar[str]
    """`FENCED_OUT`."""
    http_status: ClassVar[int]
    """409."""

class SessionLost(LockServiceError):
    """The session is gone; open another."""

class Throttled(LockServiceError):
    """Over the credential's request rate or session quota; retry later."""

class Unavailable(LockServiceError):
    """The service or the network failed; the call may or may not have been applied."""

@final
class Client:
    def __init__(
        self,
        endpoints: Sequence[str] | None = None,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        unsafe_plaintext_http: bool | None = None,
        session_ttl: float | None = None,
        request_timeout: float | None = None,
    ) -> None: ...
    def session(self, owner: str | None = None) -> Session: ...
    def revoke(self, key: str, *, admin_token: str, reason: str | None = None) -> int | None: ...
    def leader(self, name: str) -> Leader | None: ...
    def observe(self, name: str) -> Observer: ...
    def watch(self, prefix: str = "", *, after: int | None = None) -> Watcher: ...
    def close(self) -> None: ...
    def __enter__(self) -> Client: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

@final
class Session:
    def lock(
        self,
        key: str,
        *,
        ttl: float = 10.0,
        wait: float = 0.0,
        permits: int | None = None,
        shared: bool = False,
    ) -> Lock: ...
    def lock_set(
        self, keys: Sequence[str], *, ttl: float = 10.0, wait: float = 0.0
    ) -> LockSet: ...
    def campaign(
        self, name: str, value: str, *, ttl: float = 10.0, wait: float = 0.0
    ) -> Leadership: ...
    def on_lock_lost(self, listener: Callable[[LockLost], object]) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Session: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

@final
class Lock:
    @property
    def key(self) -> str: ...
    @property
    def fencing_token(self) -> int: ...
    @property
    def proof(self) -> str | None: ...
    @property
    def scope(self) -> str: ...
    @property
    def fenced_resource(self) -> str: ...
    def ensure_held(self) -> None: ...
    def remaining(self) -> float: ...
    def release(self) -> None: ...
    def __enter__(self) -> Lock: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

@final
class LockSet:
    @property
    def locks(self) -> list[Lock]: ...
    @property
    def keys(self) -> list[str]: ...
    def ensure_held(self) -> None: ...
    def release(self) -> None: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> LockSet: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

@final
class Leadership:
    @property
    def name(self) -> str: ...
    @property
    def term(self) -> int: ...
    @property
    def fencing_token(self) -> int:
        """The term, by a `Lock`'s name for it."""
    @property
    def proof(self) -> str | None: ...
    @property
    def value(self) -> str: ...
    def ensure_held(self) -> None: ...
    def remaining(self) -> float: ...
    def proclaim(self, value: str) -> None: ...
    def resign(self) -> None: ...
    def __enter__(self) -> Leadership: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

@final
class Leader:
    """An election's leader as the service answers it (for routing and display)."""

    @property
    def term(self) -> int: ...
    @property
    def value(self) -> str | None: ...
    @property
    def owner_id(self) -> str: ...
    @property
    def expires_at(self) -> datetime:
        """When its grant ends unless renewed, in UTC (display only)."""
    def __eq__(self, other: object) -> bool: ...

@final
class Observer:
    """An election's leader changes; each step waits (the GIL released) for the next."""

    def __iter__(self) -> Observer: ...
    def __next__(self) -> Leader | None: ...

EventKind: TypeAlias = Literal["granted", "released", "expired", "revoked", "proclaimed"]
"""What happened to a grant, as a `LockEvent` says it."""

@final
class LockEvent:
    """Something happened to the grant of `key` (a watch's event)."""

    @property
    def position(self) -> int:
        """Where it stands in the store's order: a watch `after` it sees only later events."""
    @property
    def key(self) -> str: ...
    @property
    def kind(self) -> EventKind: ...
    @property
    def fencing_token(self) -> int:
        """The grant's token (an election's term)."""
    @property
    def owner_id(self) -> str | None:
        """The holder's owner (`granted`)."""
    @property
    def scope(self) -> str | None:
        """A share's scope (`granted`): `shared`, `permit-{slot}`; `None` for the whole key."""
    @property
    def value(self) -> str | None:
        """What the grant announces (`proclaimed`: an election leader's value)."""
    def __eq__(self, other: object) -> bool: ...

@final
class WatchGap:
    """Events after `after` up to `resume_from` are gone: re-read the state you care about;
    the watch goes on after `resume_from`."""

    @property
    def after(self) -> int: ...
    @property
    def resume_from(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...

@final
class Watcher:
    """What happens to the locks under a prefix; each step waits (the GIL released) for the
    next event or gap. It ends only when closed: a lost stream is reopened after `position`."""

    @property
    def position(self) -> int | None:
        """The position of the last item answered (or the one the stream started after, known
        once `Client.watch` returns)."""
    @property
    def prefix(self) -> str: ...
    def __iter__(self) -> Watcher: ...
    def __next__(self) -> LockEvent | WatchGap: ...
    def close(self) -> None:
        """Closes the stream; a `next()` waiting on another thread ends within a second."""
    def __enter__(self) -> Watcher: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

class ProvenWrite:
    """A fenced write whose proof verified."""

    @property
    def key(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def grant(self) -> str: ...

@final
class TrustedKeys:
    def __init__(self, spec: str) -> None: ...
    def verify(self, key: str, token: int, proof: str | None) -> str: ...
    def verify_scoped(self, key: str, token: int, proof: str | None) -> tuple[str, str]: ...
    def verify_headers(
        self, key: str, tokens: Sequence[str], proofs: Sequence[str]
    ) -> ProvenWrite: ...

POSTGRES_MIGRATION: LiteralString
"""fence-kit's PostgreSQL fence: `fence_kit_fences` and `fence_check(...)` (idempotent)."""

def postgres_refusal(sqlstate: str, message: str) -> LockServiceError | None: ...
