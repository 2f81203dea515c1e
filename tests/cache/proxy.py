"""A loopback TCP proxy that counts the bytes clients send upstream and can freeze mid-stream.

Put between a client and the storage emulator, it shows how many bytes an upload really sent, and
``stall_after(n)`` freezes every connection once ``n`` more bytes have gone up (as a network that
dies mid-chunk would), until ``drop()`` closes them all. The emulator serves one request at a time,
so drop the stalled connections before talking to it again.
"""

from __future__ import annotations

import contextlib
import socket
import threading

BUFFER = 256 * 1024
# A frozen connection waits this long at most, so a forgotten drop() never hangs the suite.
STALL_LIMIT_S = 120.0


class CountingProxy:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self._upstream = (host, upstream_port)
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.sent_upstream = 0
        self.connections = 0
        self.stalled = threading.Event()
        self._stall_at: int | None = None
        self._unfreeze = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def reset_count(self) -> None:
        with self._lock:
            self.sent_upstream = 0
            self.connections = 0

    def stall_after(self, nbytes: int) -> None:
        with self._lock:
            self._stall_at = self.sent_upstream + nbytes
            self.stalled.clear()
            self._unfreeze.clear()

    def drop(self) -> None:
        """Close every open connection (both sides) and stop stalling."""
        with self._lock:
            self._stall_at = None
            sockets, self._sockets = self._sockets, []
        self._unfreeze.set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._closed = True
        self.drop()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream)
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, upward: bool) -> None:
        try:
            while data := source.recv(BUFFER):
                if upward and not self._admit(len(data)):
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def _admit(self, nbytes: int) -> bool:
        """Count bytes going up; a read that would pass the stall point freezes the connection."""
        with self._lock:
            if self._stall_at is None or self.sent_upstream + nbytes <= self._stall_at:
                self.sent_upstream += nbytes
                return True
        self.stalled.set()
        self._unfreeze.wait(STALL_LIMIT_S)
        return False
