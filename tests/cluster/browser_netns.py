"""Chromedriver (and the Chromium it starts) in a network namespace of its own.

Why: Chromium watches the interfaces and addresses of its network namespace (netlink) and, when
one changes, fails every request in flight with ``net::ERR_NETWORK_CHANGED``. The emulated
clusters other tests build at the same time (pytest-xdist workers) add and remove a bridge,
its address and veths in the host's namespace, so a browser test beside them saw page loads fail.
In a namespace of its own, with only its loopback, Chromium sees no change.

How: `isolated_chromedriver(ports)` puts a ``chromedriver`` first on PATH (selenium starts it
as ``chromedriver --port=P``): this module run as a script. It makes a network namespace
(unshare in one thread, so nothing in the host's namespace changes and nothing is left behind:
the namespace goes with the last process in it), brings its loopback up and starts the real
chromedriver inside. It then relays TCP between the two namespaces' loopbacks: the host's
127.0.0.1:P to chromedriver's P, and, inside, 127.0.0.1 and ::1 at each of ``ports`` (the
servers under test, listening in the host) to the host's 127.0.0.1 at the same port.

Needs root (unshare); without it `isolated_chromedriver` changes nothing (a user without root
builds no emulated clusters either).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CLONE_NEWNET = 0x40000000
FORWARD_ENV = "COMMBENCH_BROWSER_FORWARD"  # comma-separated ports relayed from the namespace to the host
REAL_ENV = "COMMBENCH_REAL_CHROMEDRIVER"


@contextlib.contextmanager
def isolated_chromedriver(ports: Sequence[int], tmp_dir: Path) -> Iterator[str | None]:
    """While open, selenium's ``chromedriver`` (found on PATH; the path yielded) runs in its own
    network namespace, reaching the host's 127.0.0.1 at ``ports``."""
    real = shutil.which("chromedriver")
    if os.geteuid() != 0 or real is None:
        yield real
        return
    wrapper = tmp_dir / "chromedriver"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} "$@"\n')
    wrapper.chmod(0o755)
    saved = {name: os.environ.get(name) for name in ("PATH", FORWARD_ENV, REAL_ENV)}
    os.environ["PATH"] = f"{tmp_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[FORWARD_ENV] = ",".join(str(port) for port in ports)
    os.environ[REAL_ENV] = real
    try:
        yield str(wrapper)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _enter_new_netns() -> None:
    """Thread initializer: this thread (only) moves to a new network namespace, loopback up."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)  # forked from this thread: runs inside


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, connect) -> None:
    try:
        upstream = connect()
    except OSError:
        client.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, connect) -> None:
    """Accept on listener for ever; each connection relayed to connect()'s socket."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_relay, args=(client, connect), daemon=True).start()


def _listener(family: int, host: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def _inside_listeners(port: int) -> list[socket.socket]:
    """Listeners at port on the namespace's 127.0.0.1 and ::1 ("localhost" may be either)."""
    found = [_listener(socket.AF_INET, "127.0.0.1", port)]
    with contextlib.suppress(OSError):
        found.append(_listener(socket.AF_INET6, "::1", port))
    return found


def _wait_accepting(inside: ThreadPoolExecutor, port: int, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            inside.submit(socket.create_connection, ("127.0.0.1", port), 1).result().close()
            return
        except OSError:
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    port = next(int(arg.split("=", 1)[1]) for arg in argv if arg.startswith("--port="))
    forwarded = [int(p) for p in os.environ.get(FORWARD_ENV, "").split(",") if p]
    # one thread lives in the namespace: what it creates (sockets, the chromedriver process) is inside
    inside = ThreadPoolExecutor(max_workers=1, initializer=_enter_new_netns)
    for forwarded_port in forwarded:
        for listener in inside.submit(_inside_listeners, forwarded_port).result():
            connect_host = lambda p=forwarded_port: socket.create_connection(("127.0.0.1", p))  # noqa: E731
            threading.Thread(target=_serve, args=(listener, connect_host), daemon=True).start()
    driver = inside.submit(subprocess.Popen, [os.environ[REAL_ENV], *argv]).result()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: driver.terminate())
    _wait_accepting(inside, port, driver)
    # the host's side opens only once chromedriver answers, so selenium's "is it up" probe is true
    outside = _listener(socket.AF_INET, "127.0.0.1", port)
    connect_inside = lambda: inside.submit(socket.create_connection, ("127.0.0.1", port)).result()  # noqa: E731
    threading.Thread(target=_serve, args=(outside, connect_inside), daemon=True).start()
    code = driver.wait()
    outside.close()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
