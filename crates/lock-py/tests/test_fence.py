"""The resource side for Python: a write's token and proof checked offline, by fence-kit's
rule, against the lock-server's public keys."""

from __future__ import annotations

import uuid

import pytest

import fencedlock
from conftest import Server


def test_a_grants_proof_is_verified_offline_and_anything_else_refused(server: Server) -> None:
    key = f"py:{uuid.uuid4().hex[:12]}"
    trusted = fencedlock.TrustedKeys(server.public_keys)
    with server.client() as client, client.session() as session:
        with session.lock(key, ttl=5.0) as lock:
            grant = trusted.verify(lock.key, lock.fencing_token, lock.proof)
            assert grant, "the proof names its grant"
            refused = [
                (lock.key, lock.fencing_token + 1, lock.proof),  # another token
                (f"{key}-other", lock.fencing_token, lock.proof),  # another key
                (lock.key, lock.fencing_token, None),  # no proof
                (lock.key, lock.fencing_token, "not-a-proof"),  # malformed
            ]
            for write in refused:
                with pytest.raises(fencedlock.ProofInvalid):
                    trusted.verify(*write)
    with pytest.raises(fencedlock.ConfigError):
        fencedlock.TrustedKeys("not a key list")
