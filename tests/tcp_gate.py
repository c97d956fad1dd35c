"""A TCP port of the tests' own that forwards to a server behind it, and is closed while none serves.

``gate.open(backend_port)`` listens on 127.0.0.1 (the same port each time it reopens) and relays every
connection to ``backend_port``; ``close()`` stops listening and cuts every relayed connection, so clients
see what a stopped server shows them: refused connects, dropped connections. A test server restarted
behind a gate is reachable only once the test opens the gate again, whatever the server does while it
starts (see ``zookeeper_server``).
"""

from __future__ import annotations

import socket
import threading

_CHUNK = 65536


class TcpGate:
    def __init__(self):
        self.port: int | None = None  # fixed by the first open()
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()
        self._relayed: set[socket.socket] = set()

    def open(self, backend_port: int) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port or 0))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener, backend_port), daemon=True,
                         name=f"gate-{self.port}").start()

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            _shut(listener)  # wakes the accepting thread, which closes it
        with self._lock:
            relayed, self._relayed = self._relayed, set()
        for sock in relayed:
            _shut(sock)  # wakes the relaying threads, which close them

    def _accept(self, listener: socket.socket, backend_port: int) -> None:
        with listener:
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:  # shut by close()
                    return
                try:
                    backend = socket.create_connection(("127.0.0.1", backend_port))
                except OSError:
                    client.close()  # the server behind is gone: the client sees its connection dropped
                    continue
                with self._lock:
                    if self._listener is not listener:  # closed meanwhile
                        client.close()
                        backend.close()
                        return
                    self._relayed |= {client, backend}
                for source, sink in ((client, backend), (backend, client)):
                    threading.Thread(target=self._relay, args=(source, sink), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy ``source`` to ``sink`` until either side ends, then end both (each thread closes its source)."""
        try:
            while data := source.recv(_CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _shut(source)
            _shut(sink)
            with self._lock:
                self._relayed.discard(source)
            source.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # not connected, or already shut
        pass
