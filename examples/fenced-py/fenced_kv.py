"""A fenced key-value resource on PostgreSQL, in Python: the twin of the Rust example
`fenced-kv` (examples/fenced/src/bin/fenced-kv.rs), on `fencedlock.fastapi` and
`fencedlock.psycopg`.

`PUT /kv/{name}` (body: the value, UTF-8, at most 64 KiB) writes for the holder of lock key
`kv:{name}`, with `X-Fencing-Token` and `X-Fencing-Proof`: the proof is verified offline, then
the fence is claimed and the value written in one transaction. `GET /kv/{name}` reads.
Refusals are `{"code","message"}`.

Environment: `DATABASE_URL` (a PostgreSQL URL), `FENCE_PUBLIC_KEYS` (`key_id=base64,...`).
Run: `uvicorn fenced_kv:create_app --factory --app-dir examples/fenced-py`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool

import fencedlock
from fencedlock.fastapi import add_refusal_handlers, fenced_write
from fencedlock.psycopg import fence_check, install

VALUE_MAX_BYTES = 64 * 1024
"""Largest value accepted."""

TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS kv "
    "(name text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)"
)

UPSERT_SQL = (
    "INSERT INTO kv (name, value, token) VALUES (%s, %s, %s) "
    "ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token"
)


def required_env(name: str) -> str:
    """The variable `name`, or a start-up error that names it."""
    value = os.environ.get(name, "").strip()
    if not value:
        raise RuntimeError(f"fenced-kv: {name} is not set")
    return value


def lock_key(request: Request) -> str:
    """The lock key that guards a write of `/kv/{name}`."""
    return f"kv:{request.path_params['name']}"


class Store:
    """The values, in PostgreSQL; one connection per call (an example, not a pool)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def migrate(self) -> None:
        """The fence (fence-kit's migration) and the table of values."""
        with psycopg.connect(self.url) as conn:
            install(conn)
            conn.execute(TABLE_SQL)

    def put(self, name: str, value: str, write: fencedlock.ProvenWrite) -> None:
        """The fenced write: the claim and the write in one transaction, under the fence's
        row lock."""
        with psycopg.connect(self.url) as conn, conn.transaction():
            fence_check(conn, write.key, write.token, write.grant, claim=True)
            conn.execute(UPSERT_SQL, (name, value, write.token))

    def get(self, name: str) -> str | None:
        """The value of `name`, if one was written."""
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT value FROM kv WHERE name = %s", (name,)).fetchone()
            return None if row is None else str(row[0])


def refused(status: int, code: str, message: str) -> JSONResponse:
    """A refusal that is not the fence's, in the same shape."""
    return JSONResponse({"code": code, "message": message}, status_code=status)


async def store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """A database error that is not a refusal: the store did not answer."""
    print(f"fenced-kv: store error: {exc}", flush=True)
    return refused(503, "STORE_UNAVAILABLE", "the store did not answer")


def create_app() -> FastAPI:
    """The service, configured from the environment (for `uvicorn --factory`)."""
    store = Store(required_env("DATABASE_URL"))
    kv_write = fenced_write(fencedlock.TrustedKeys(required_env("FENCE_PUBLIC_KEYS")), lock_key)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(store.migrate)
        yield

    app = FastAPI(title="fenced-kv (Python)", lifespan=lifespan)
    add_refusal_handlers(app)
    app.add_exception_handler(psycopg.Error, store_unavailable)

    @app.put("/kv/{name}", status_code=204)
    async def put_value(
        name: str, request: Request, write: fencedlock.ProvenWrite = Depends(kv_write)
    ) -> Response:
        body = await request.body()
        if len(body) > VALUE_MAX_BYTES:
            return refused(413, "PAYLOAD_TOO_LARGE", f"at most {VALUE_MAX_BYTES} bytes")
        try:
            value = body.decode("utf-8")
        except UnicodeDecodeError:
            return refused(400, "INVALID_ARGUMENT", "body: not UTF-8")
        await run_in_threadpool(store.put, name, value, write)
        return Response(status_code=204)

    @app.get("/kv/{name}")
    async def get_value(name: str) -> Response:
        value = await run_in_threadpool(store.get, name)
        if value is None:
            return refused(404, "NOT_FOUND", f"no value for {name}")
        return PlainTextResponse(value)

    return app
