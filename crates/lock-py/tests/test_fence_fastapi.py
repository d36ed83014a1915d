"""`fencedlock.fastapi` through a real app (FastAPI's TestClient): the dependency reads the
headers by fence-kit's rule and verifies real proofs from a lock-server; every bad write is
refused as `{"code","message"}` with its status before the route runs, so nothing is written."""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid

from fastapi import Depends, FastAPI, Request
from fastapi.testclient import TestClient

import fencedlock
from conftest import Server
from fencedlock.fastapi import add_refusal_handlers, fenced_write

Headers = list[tuple[str, str]]


def doc_key(request: Request) -> str:
    return f"doc:{request.path_params['name']}"


def app_recording(trusted: fencedlock.TrustedKeys, writes: list[fencedlock.ProvenWrite]) -> FastAPI:
    """A resource whose write records the proven write it was given."""
    app = FastAPI()
    add_refusal_handlers(app)
    doc_write = fenced_write(trusted, doc_key)

    @app.put("/doc/{name}", status_code=204)
    def put_doc(name: str, write: fencedlock.ProvenWrite = Depends(doc_write)) -> None:
        writes.append(write)

    return app


def forged(proof: str) -> str:
    """The proof with one bit of its signature flipped: well formed, signing nothing."""
    head, signature = proof.rsplit(".", 1)
    raw = bytearray(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)))
    raw[0] ^= 1
    return f"{head}.{base64.urlsafe_b64encode(bytes(raw)).decode().rstrip('=')}"


def bad_writes(
    token: int, proof: str, other_token: int, other_proof: str
) -> list[tuple[str, Headers, int, str]]:
    """(what, headers, status, code) of every write that must be refused."""
    t, p = "X-Fencing-Token", "X-Fencing-Proof"
    invalid, forbidden = (400, "INVALID_ARGUMENT"), (403, "PROOF_INVALID")
    return [
        ("no token", [(p, proof)], *invalid),
        ("the token twice", [(t, str(token)), (t, str(token)), (p, proof)], *invalid),
        ("a token that is not digits", [(t, "7a"), (p, proof)], *invalid),
        ("a signed token", [(t, f"+{token}"), (p, proof)], *invalid),
        ("token 0", [(t, "0"), (p, proof)], *invalid),
        ("a token beyond a bigint", [(t, str(2**63)), (p, proof)], *invalid),
        ("two tokens in one header", [(t, f"{token}, {token}"), (p, proof)], *invalid),
        ("the proof twice", [(t, str(token)), (p, proof), (p, proof)], *invalid),
        ("no proof", [(t, str(token))], *forbidden),
        ("a malformed proof", [(t, str(token)), (p, "not-a-proof")], *forbidden),
        ("a relabelled token", [(t, str(token + 1)), (p, proof)], *forbidden),
        ("a forged signature", [(t, str(token)), (p, forged(proof))], *forbidden),
        ("another key's proof", [(t, str(other_token)), (p, other_proof)], *forbidden),
    ]


def test_bad_writes_are_refused_as_json_and_nothing_is_written(server: Server) -> None:
    name = uuid.uuid4().hex[:12]
    writes: list[fencedlock.ProvenWrite] = []
    trusted = fencedlock.TrustedKeys(server.public_keys)
    http = TestClient(app_recording(trusted, writes))
    with server.client() as client, client.session() as session:
        lock, other = session.lock(f"doc:{name}", ttl=5.0), session.lock(f"doc:{name}-x", ttl=5.0)
        with lock, other:
            assert lock.proof is not None and other.proof is not None
            for what, headers, status, code in bad_writes(
                lock.fencing_token, lock.proof, other.fencing_token, other.proof
            ):
                answer = http.put(f"/doc/{name}", headers=headers)
                body = answer.json() if answer.content else {}
                assert (answer.status_code, body.get("code")) == (status, code), (
                    f"{what}: {answer.status_code} {answer.text}"
                )
                assert set(body) == {"code", "message"} and body["message"], what
            assert writes == [], "no refused write reached the route"

            headers = [("X-Fencing-Token", str(lock.fencing_token))]
            headers.append(("X-Fencing-Proof", lock.proof))
            assert http.put(f"/doc/{name}", headers=headers).status_code == 204
            grant = trusted.verify(lock.key, lock.fencing_token, lock.proof)
    [write] = writes
    assert (write.key, write.token, write.grant) == (f"doc:{name}", lock.fencing_token, grant)


def test_a_route_whose_name_makes_no_lock_key_is_invalid_argument(server: Server) -> None:
    writes: list[fencedlock.ProvenWrite] = []
    http = TestClient(app_recording(fencedlock.TrustedKeys(server.public_keys), writes))
    answer = http.put(f"/doc/{'x' * 2000}", headers=[("X-Fencing-Token", "1")])
    assert (answer.status_code, answer.json()["code"]) == (400, "INVALID_ARGUMENT")
    assert writes == []


def test_importing_fencedlock_needs_neither_psycopg_nor_fastapi() -> None:
    check = "import sys, fencedlock; assert not {'psycopg', 'fastapi'} & set(sys.modules)"
    ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
