"""fence-kit's PostgreSQL fence for resources on psycopg 3 (extra `fencedlock[psycopg]`).

`install(conn)` applies fence-kit's own migration (the SQL of `fence_kit::postgres::MIGRATION`,
from the native module: one copy of it, in Rust): the table `fence_kit_fences` and the
function `fence_check(resource, token, grant, claim)`. `fence_check(...)` runs it in the
caller's own transaction, before the write it guards; a refusal raises, so the transaction is
left aborted and nothing it wrote is kept::

    from fencedlock.psycopg import fence_check, install

    install(conn)                                  # once, at startup (idempotent)
    with conn.transaction():
        fence_check(conn, write.key, write.token, write.grant, claim=True)
        conn.execute("UPDATE kv SET value = %s WHERE name = %s", (value, name))

Refusals: `FencedOut` (SQLSTATE 'FENCE': a newer grant holds the fence; 409) and
`InvalidArgument` (SQLSTATE '22023': a token below 1, an empty resource or grant; 400), by
fence-kit's own mapping. Any other database error is raised unchanged.
"""

from __future__ import annotations

from typing import Any, Union

import psycopg
from psycopg.pq import TransactionStatus

from fencedlock import _native
from fencedlock._native import InvalidArgument

MIGRATION = _native.POSTGRES_MIGRATION
"""fence-kit's migration SQL: `fence_kit_fences` and `fence_check(...)` (idempotent)."""

CHECK_SQL = "SELECT fence_check(%s, %s, %s, %s)"
"""The statement `fence_check` runs: resource, token, the proof's grant id, claim."""

SHARED_CHECK_SQL = "SELECT fence_check(%s, %s, %s, false, true)"
"""The statement `fence_check(shared=True)` runs for a reader: resource, token, grant id."""

TOKEN_MAX = 2**63 - 1
"""The largest token a fence holds (a PostgreSQL bigint; lock stores issue no larger)."""

Executor = Union["psycopg.Connection[Any]", "psycopg.Cursor[Any]"]
"""What `fence_check` runs on: the writing transaction's connection or one of its cursors."""

__all__ = [
    "CHECK_SQL",
    "MIGRATION",
    "SHARED_CHECK_SQL",
    "TOKEN_MAX",
    "Executor",
    "fence_check",
    "install",
]


def install(conn: psycopg.Connection[Any]) -> None:
    """Creates (or updates) the fence table and `fence_check`, in a transaction of its own
    (a savepoint when `conn` is already in one)."""
    with conn.transaction():
        conn.execute(MIGRATION)


def fence_check(
    executor: Executor,
    resource: str,
    token: int,
    grant: str,
    *,
    claim: bool = False,
    shared: bool = False,
) -> int:
    """Passes the write of `grant` (with `token`) to `resource` through the fence, in the
    caller's transaction, and answers the fence after it.

    A claim (`claim=True`) passes with a token above the fence, or the grant that set it
    again, and raises the fence to this grant; a later write passes only from the grant that
    set the fence. A reader of a read/write lock (`shared=True`) passes with a token above
    the fence (the last writer's claim) and never moves it; readers share the fence row.
    Raises `FencedOut` or `InvalidArgument`; the transaction is then aborted
    (roll it back, or let `conn.transaction()` do it). A connection in autocommit mode
    outside a transaction is refused with `RuntimeError`: the fence would be released before
    the write it guards.
    """
    conn = executor if isinstance(executor, psycopg.Connection) else executor.connection
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise RuntimeError(
            "fence_check must run in the writing transaction: "
            "use `with conn.transaction():` on an autocommit connection"
        )
    if claim and shared:
        raise InvalidArgument("fence_check: a claim is a writer's, never shared")
    if not -TOKEN_MAX - 1 <= token <= TOKEN_MAX:
        raise InvalidArgument(f"fence_check: token must fit a bigint, got {token}")
    try:
        if shared:
            row = executor.execute(SHARED_CHECK_SQL, (resource, token, grant)).fetchone()
        else:
            row = executor.execute(CHECK_SQL, (resource, token, grant, claim)).fetchone()
    except psycopg.Error as err:
        refusal = _native.postgres_refusal(err.sqlstate or "", err.diag.message_primary or "")
        if refusal is None:
            raise
        raise refusal from err
    assert row is not None, "fence_check answers one row"
    return int(row[0])
