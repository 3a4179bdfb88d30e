"""A PostgreSQL server that answers and refuses is heard at once (persist/adapters.pg_refusal):
a database or role that does not exist ends the open with the server's words, not after a
pool has waited out its timeout. A server not reached, or one saying it cannot take a
connection for now, still gets the wait."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from envelopay.errors import StoreError
from envelopay.ledger.postgres import PostgresStore
from envelopay.persist.adapters import pg_refusal


@pytest.fixture
def server(pg_dsn: str) -> str:
    """The test server's DSN without its database: postgresql://[user@]host:port."""
    return pg_dsn.split("?", 1)[0].rsplit("/", 1)[0]


def test_a_database_that_does_not_exist_is_refused_in_the_servers_words(server: str) -> None:
    assert pg_refusal(f"{server}/no_such_db_r7") == 'database "no_such_db_r7" does not exist'
    with pytest.raises(StoreError, match='database "no_such_db_r7" does not exist'):
        PostgresStore(f"{server}/no_such_db_r7")


def test_a_role_that_does_not_exist_is_refused_in_the_servers_words(server: str) -> None:
    host = server.split("://", 1)[1].rpartition("@")[2]
    assert pg_refusal(f"postgresql://no_such_role_r7@{host}/test") == 'role "no_such_role_r7" does not exist'


def test_a_database_that_takes_the_connection_is_no_refusal(pg_dsn: str) -> None:
    assert pg_refusal(pg_dsn) is None


def test_a_port_nobody_listens_on_is_left_to_the_wait() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    assert pg_refusal(f"postgresql://127.0.0.1:{port}/test", timeout=2) is None


def _error_response(severity: str, code: str, message: str) -> bytes:
    # PostgreSQL frontend/backend protocol, ErrorResponse ('E'): fields S, V, C, M, then a
    # NUL (https://www.postgresql.org/docs/current/protocol-message-formats.html).
    fields = b"".join(t + v.encode() + b"\0" for t, v in
                      ((b"S", severity), (b"V", severity), (b"C", code), (b"M", message))) + b"\0"
    return b"E" + struct.pack("!i", len(fields) + 4) + fields


@pytest.fixture
def fake_server(request: pytest.FixtureRequest) -> Iterator[int]:
    """A server that answers every startup with one FATAL (code, message): request.param."""
    code, message = request.param
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.1)  # accept() looks at `stop` between waits
    port = srv.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            with conn:
                try:
                    while True:
                        size = struct.unpack("!i", conn.recv(4, socket.MSG_WAITALL))[0]
                        body = conn.recv(size - 4, socket.MSG_WAITALL)
                        if struct.unpack("!i", body[:4])[0] in (80877103, 80877104):  # SSL, GSSENC request
                            conn.sendall(b"N")
                            continue
                        conn.sendall(_error_response("FATAL", code, message))
                        break
                except (OSError, struct.error):
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join(5)
        srv.close()


@pytest.mark.parametrize(("fake_server", "refusal"), [
    (("57P03", "the database system is starting up"), None),
    (("57P03", "the database system is not yet accepting connections"), None),
    (("53300", "sorry, too many clients already"), None),
    (("3D000", 'database "x" does not exist'), 'database "x" does not exist'),
    (("28P01", 'password authentication failed for user "u"'), 'password authentication failed for user "u"'),
], indirect=["fake_server"])
def test_a_server_saying_for_now_gets_the_wait_and_one_refusing_is_heard(fake_server: int,
                                                                         refusal: str | None) -> None:
    assert pg_refusal(f"postgresql://127.0.0.1:{fake_server}/test", timeout=2) == refusal
