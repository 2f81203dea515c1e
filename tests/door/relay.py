"""A TCP relay on loopback between the door and llama-server: the member's "VM address".

It counts every HTTP request the door sends upstream (a request line seen in the byte stream), so
a test can prove a request never reached the VM, and it can hold back the server's first response
bytes by a set delay, so a test can inject a known time before the first token. It can also close a
kept-alive connection as a later request arrives on it, unanswered, as llama-server b11434 sometimes
does (``drop_reused``). While nothing
listens behind it (the VM still booting), it accepts and closes at once.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from dataclasses import dataclass, field

_REQUEST_LINE = re.compile(rb"(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) (/\S*) HTTP/1\.[01]\r\n")
BUFFER = 65536


@dataclass
class Relay:
    target_port: int
    response_delay_s: float = 0.0
    """Held back before the first bytes of the answer to each proxied request (not to the door's
    /health polls) reach the door."""
    requests: list[tuple[str, str]] = field(default_factory=list)
    host: str = "127.0.0.1"
    """The "VM's" address: another loopback address (127.0.0.2) stands for a member a repair moved."""
    listen_port: int = 0
    drop_reused: int = 0
    """The next this many requests that arrive on a connection that already carried one are dropped."""
    dropped: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _open: set[socket.socket] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((self.host, self.listen_port))
        self.sock.listen(128)
        self.port = int(self.sock.getsockname()[1])
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def proxied(self) -> list[tuple[str, str]]:
        """The requests other than the door's /health polls."""
        with self._lock:
            return [r for r in self.requests if r[1] != "/health"]

    def close(self) -> None:
        """As the VM going away: no new connection, and every open one cut (a keep-alive too)."""
        self._stop = True
        # A listening socket closed under a thread blocked in accept() keeps accepting on Linux;
        # shutting it down first wakes the accept with an error.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(timeout=5)
        with self._lock:
            live, self._open = list(self._open), set()
        for sock in live:
            _close(sock)

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self._open.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.add(upstream)
        delay_next = threading.Event()
        threading.Thread(target=self._pump_up, args=(client, upstream, delay_next), daemon=True).start()
        self._pump_down(upstream, client, delay_next)

    def _pump_up(self, src: socket.socket, dst: socket.socket, delay_next: threading.Event) -> None:
        carried = 0
        try:
            while data := src.recv(BUFFER):
                found = [(m.group(1).decode(), m.group(2).decode()) for m in _REQUEST_LINE.finditer(data)]
                with self._lock:
                    if found and carried and self.drop_reused > 0:
                        self.drop_reused -= 1
                        self.dropped += 1
                        return
                    carried += len(found)
                    self.requests.extend(found)
                if any(path != "/health" for _, path in found):
                    delay_next.set()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(dst)
            _close(src)

    def _pump_down(self, src: socket.socket, dst: socket.socket, delay_next: threading.Event) -> None:
        try:
            while data := src.recv(BUFFER):
                if delay_next.is_set():
                    delay_next.clear()
                    time.sleep(self.response_delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(dst)
            _close(src)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
