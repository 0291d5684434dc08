"""
A TLS front for the bundled PostgreSQL, which is built without SSL.

("SSL is not supported by this build".) It speaks the server half of PostgreSQL's TLS
negotiation on a TCP port and relays the decrypted stream to the server's Unix socket.

A robot's libpq therefore does exactly what it does against a site's hub: SSLRequest, a TLS
handshake that verifies the certificate (``sslmode=verify-full``), then SCRAM authentication
inside the tunnel. A client that does not ask for TLS is turned away, as ``hostssl`` does.
"""

from __future__ import annotations

import pathlib
import socket
import ssl
import struct
import threading

SSL_REQUEST = 80877103      # the protocol's request codes (PostgreSQL docs, "SSL Session
GSSENC_REQUEST = 80877104   # Encryption" and "GSSAPI Session Encryption")


class TlsFront:
    """Accept TLS connections on 127.0.0.1 and relay each to the server's Unix socket."""

    def __init__(self, unix_socket: str, cert: pathlib.Path, key: pathlib.Path) -> None:
        self._unix_socket = unix_socket
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(cert, key)
        self._listener = socket.create_server(('127.0.0.1', 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            while True:
                length, code = struct.unpack('!ii', _read_exactly(client, 8))
                if length == 8 and code == GSSENC_REQUEST:
                    client.sendall(b'N')  # no GSSAPI: libpq goes on to ask for TLS
                    continue
                if length == 8 and code == SSL_REQUEST:
                    break
                return  # a plain start-up packet: refused, like a hostssl-only hba
            client.sendall(b'S')
            tunnel = self._context.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError, struct.error):
            client.close()
            return
        server = socket.socket(socket.AF_UNIX)
        try:
            server.connect(self._unix_socket)
        except OSError:
            tunnel.close()
            return
        threading.Thread(target=_pump, args=(server, tunnel), daemon=True).start()
        _pump(tunnel, server)

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b''
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError('peer closed during negotiation')
        data += chunk
    return data


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes one way until either side closes; then close both."""
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except (OSError, ssl.SSLError):
        pass
    finally:
        for sock in (source, sink):  # shutdown wakes the other direction's recv
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
