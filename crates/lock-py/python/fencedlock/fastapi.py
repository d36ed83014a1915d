"""FastAPI glue for a fenced resource (extra `fencedlock[fastapi]`).

`fenced_write(trusted, lock_key)` is a dependency: it reads `X-Fencing-Token` and
`X-Fencing-Proof` (each sent exactly once) and verifies the proof offline, for the lock key
the route names, by fence-kit's own header rule and proof check (`TrustedKeys.verify_headers`),
and answers the proven write (`key`, `token`, `grant`). `add_refusal_handlers(app)` renders
the refusals as `{"code","message"}`: `INVALID_ARGUMENT` 400 (a header missing, repeated or
malformed), `PROOF_INVALID` 403, `FENCED_OUT` 409 (from `fencedlock.psycopg.fence_check`)::

    trusted = fencedlock.TrustedKeys(os.environ["FENCE_PUBLIC_KEYS"])
    kv_write = fenced_write(trusted, lambda request: f"kv:{request.path_params['name']}")

    app = FastAPI()
    add_refusal_handlers(app)

    @app.put("/kv/{name}", status_code=204)
    def put_value(name: str, write: ProvenWrite = Depends(kv_write)) -> None:
        ...  # fence_check(conn, write.key, write.token, write.grant, claim=True), then write

(`Depends` as the default rather than in `Annotated[...]`: a dependency made at run time is
a local name, which FastAPI cannot resolve from a postponed annotation.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from fencedlock._native import FencedOut, InvalidArgument, ProofInvalid, ProvenWrite, TrustedKeys

TOKEN_HEADER = "x-fencing-token"
"""The header a fenced write carries its token in."""

PROOF_HEADER = "x-fencing-proof"
"""The header a fenced write carries the lock-server's proof in."""

Refusal = Union[InvalidArgument, ProofInvalid, FencedOut]
"""A fenced write's refusal: each has its `code` and `http_status`."""

REFUSALS: tuple[type[Refusal], ...] = (InvalidArgument, ProofInvalid, FencedOut)
"""The refusals `add_refusal_handlers` renders."""

__all__ = [
    "PROOF_HEADER",
    "REFUSALS",
    "TOKEN_HEADER",
    "Refusal",
    "add_refusal_handlers",
    "fenced_write",
    "refusal_response",
]


def fenced_write(
    trusted: TrustedKeys, lock_key: Callable[[Request], str]
) -> Callable[[Request], Awaitable[ProvenWrite]]:
    """A dependency that answers the request's proven write for the lock key
    `lock_key(request)` (e.g. from `request.path_params`), or raises `InvalidArgument` (400)
    or `ProofInvalid` (403) before the route runs."""

    async def proven_write(request: Request) -> ProvenWrite:
        return trusted.verify_headers(
            lock_key(request),
            request.headers.getlist(TOKEN_HEADER),
            request.headers.getlist(PROOF_HEADER),
        )

    return proven_write


async def refusal_response(request: Request, exc: Exception) -> JSONResponse:
    """`{"code","message"}` with the refusal's status; any other exception is raised again."""
    if not isinstance(exc, REFUSALS):
        raise exc
    return JSONResponse({"code": exc.code, "message": str(exc)}, status_code=exc.http_status)


def add_refusal_handlers(app: FastAPI) -> None:
    """Renders every refusal of `REFUSALS` raised by a dependency or a route as JSON."""
    for refusal in REFUSALS:
        app.add_exception_handler(refusal, refusal_response)
