"""`fencedlock.psycopg` on a real PostgreSQL: fence-kit's migration installed from the native
module, the fence rule in the caller's transaction, refusals typed, a refused transaction
rolled back whole."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import fencedlock
from conftest import Server
from fencedlock import _native
from fencedlock.psycopg import fence_check, install

WRITES_SQL = "CREATE TABLE IF NOT EXISTS fence_test_writes (resource text, value text)"


@pytest.fixture()
def conn(server: Server) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the suite's resource database, the fence installed (twice: it is
    idempotent)."""
    with psycopg.connect(server.database_url) as conn:
        install(conn)
        install(conn)
        with conn.transaction():
            conn.execute(WRITES_SQL)
        yield conn


def resource() -> str:
    return f"doc:{uuid.uuid4().hex[:12]}"


def written(conn: psycopg.Connection[Any], name: str) -> list[str]:
    rows = conn.execute(
        "SELECT value FROM fence_test_writes WHERE resource = %s ORDER BY value", (name,)
    ).fetchall()
    conn.commit()
    return [str(row[0]) for row in rows]


def write(conn: psycopg.Connection[Any], name: str, token: int, grant: str, claim: bool) -> None:
    """A fenced write: the check, then the row, in one transaction."""
    with conn.transaction():
        conn.execute("INSERT INTO fence_test_writes VALUES (%s, %s)", (name, f"{grant}-{claim}"))
        fence_check(conn, name, token, grant, claim=claim)


def test_the_migration_is_fence_kits_own_sql() -> None:
    assert "CREATE FUNCTION fence_check(" in fencedlock.psycopg.MIGRATION
    assert fencedlock.psycopg.MIGRATION is _native.POSTGRES_MIGRATION


def test_a_claim_and_its_holders_writes_pass_and_a_stale_grant_is_fenced_out(
    conn: psycopg.Connection[Any],
) -> None:
    name = resource()
    with conn.transaction():
        assert fence_check(conn, name, 5, "g5", claim=True) == 5
    with conn.transaction(), conn.cursor() as cursor:
        assert fence_check(cursor, name, 5, "g5") == 5, "the holder's later write, on a cursor"
    for token, grant, claim in [(5, "other", False), (4, "g4", True), (4, "g4", False)]:
        with pytest.raises(fencedlock.FencedOut) as refused:
            write(conn, name, token, grant, claim)
        assert refused.value.code == "FENCED_OUT" and refused.value.http_status == 409
        assert isinstance(refused.value, fencedlock.LockServiceError)
        assert f"token {token}" in str(refused.value), str(refused.value)
    assert written(conn, name) == [], "each refused transaction rolled back whole"

    write(conn, name, 6, "g6", claim=True)
    with pytest.raises(fencedlock.FencedOut):
        write(conn, name, 5, "g5", claim=False)
    assert written(conn, name) == ["g6-True"], "only the newer holder's write is kept"


def test_a_refusal_outside_a_transaction_block_leaves_the_transaction_aborted(
    conn: psycopg.Connection[Any],
) -> None:
    name = resource()
    write(conn, name, 2, "g2", claim=True)
    conn.execute("INSERT INTO fence_test_writes VALUES (%s, 'stale')", (name,))
    with pytest.raises(fencedlock.FencedOut):
        fence_check(conn, name, 1, "g1", claim=True)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.rollback()
    assert written(conn, name) == ["g2-True"]


def test_bad_arguments_are_invalid_argument(conn: psycopg.Connection[Any]) -> None:
    name = resource()
    for resource_name, token, grant in [
        (name, 0, "g"),
        (name, -3, "g"),
        ("", 1, "g"),
        (name, 1, ""),
        (name, 2**63, "g"),
    ]:
        with pytest.raises(fencedlock.InvalidArgument) as refused:
            write(conn, resource_name, token, grant, claim=True)
        assert refused.value.code == "INVALID_ARGUMENT" and refused.value.http_status == 400
    assert written(conn, name) == []


def test_an_autocommit_connection_outside_a_transaction_is_refused(server: Server) -> None:
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        with pytest.raises(RuntimeError, match="writing transaction"):
            fence_check(conn, resource(), 1, "g1", claim=True)
        with conn.transaction():
            assert fence_check(conn, resource(), 1, "g1", claim=True) == 1


def test_other_database_errors_stay_the_writers_own() -> None:
    assert _native.postgres_refusal("23505", "duplicate key") is None
    assert _native.postgres_refusal("22023", "not fence_check's own") is None
    fenced = _native.postgres_refusal("FENCE", "fenced out: token 1")
    assert isinstance(fenced, fencedlock.FencedOut)


def test_a_reader_passes_above_the_last_writers_claim_and_never_moves_the_fence(
    conn: psycopg.Connection[Any],
) -> None:
    name = resource()
    write(conn, name, 5, "writer-5", claim=True)
    with conn.transaction():
        assert fence_check(conn, name, 6, "reader-6", shared=True) == 5
    with pytest.raises(fencedlock.FencedOut):
        with conn.transaction():
            fence_check(conn, name, 4, "reader-4", shared=True)
    # The readers left the fence where the writer put it: its holder still writes.
    with conn.transaction():
        assert fence_check(conn, name, 5, "writer-5") == 5
    with pytest.raises(fencedlock.InvalidArgument):
        fence_check(conn, name, 7, "writer-7", claim=True, shared=True)
