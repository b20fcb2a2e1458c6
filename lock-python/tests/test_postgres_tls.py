"""PostgreSQL over TLS from Python: the URL's sslmode and sslrootcert, as
libpq means them, against the TLS cluster ./scripts/test starts (roles
lock_tls may log in over TLS only; the server certificate names localhost)."""

from __future__ import annotations

import os
import uuid

import pytest

import lease_lock

from conftest import POSTGRES, _need


def _url(host: str, query: str) -> str:
    _need(POSTGRES, "LOCK_POSTGRES_URL")
    port = os.environ["LOCK_POSTGRES_PORT"]
    return f"postgres://lock_tls:lock_tls@{host}:{port}/lock_test?{query}"


def _ca() -> str:
    return os.path.join(os.environ["LOCK_POSTGRES_TLS_DIR"], "ca.crt")


def test_verify_full_connects_and_locks() -> None:
    store = lease_lock.PostgresStore(
        _url("localhost", f"sslmode=verify-full&sslrootcert={_ca()}"), table=f"py_tls_{uuid.uuid4().hex[:12]}"
    )
    store.create_schema()
    client = lease_lock.LockClient(store, owner="tls")
    try:
        with client.lock("job") as lock:
            assert lock.fence >= 1
    finally:
        client.close()


def test_a_certificate_for_another_name_is_refused() -> None:
    store = lease_lock.PostgresStore(
        _url("127.0.0.1", f"sslmode=verify-full&sslrootcert={_ca()}"), table=f"py_tls_{uuid.uuid4().hex[:12]}"
    )
    with pytest.raises(lease_lock.StoreSetupError, match="certificate"):
        store.create_schema()


def test_an_unreadable_root_certificate_is_refused_when_the_store_is_made() -> None:
    with pytest.raises(lease_lock.StoreSetupError, match="/nonexistent.pem"):
        lease_lock.PostgresStore(_url("localhost", "sslmode=verify-full&sslrootcert=/nonexistent.pem"))
