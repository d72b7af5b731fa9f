"""Tiny TCP tools for checking the emulated network (stdlib only, starts fast).

tcp_probe.py recv PORT NBYTES      accept one connection, read NBYTES, print JSON
                                   {"bytes", "seconds", "GBps"} (timed first -> last byte)
tcp_probe.py send ADDR PORT NBYTES connect (retrying up to 10 s) and send NBYTES
tcp_probe.py listen PORT           accept and close connections forever
tcp_probe.py connect ADDR PORT TIMEOUT   exit 0 if a connection succeeds within TIMEOUT s,
                                   else 1; prints {"ok", "seconds", "error"}
"""

from __future__ import annotations

import json
import socket
import sys
import time


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "recv":
        port, n = int(argv[1]), int(argv[2])
        with socket.create_server(("0.0.0.0", port)) as srv:
            srv.settimeout(60)
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(60)
                buf = bytearray(1 << 20)
                got = conn.recv_into(buf)
                t0 = time.perf_counter()
                first = got
                while got < n:
                    k = conn.recv_into(buf)
                    if not k:
                        break
                    got += k
                dt = time.perf_counter() - t0
        print(json.dumps({"bytes": got, "seconds": dt, "GBps": (got - first) / dt / 1e9}))
        return 0 if got >= n else 1
    if mode == "send":
        addr, port, n = argv[1], int(argv[2]), int(argv[3])
        deadline = time.monotonic() + 10
        while True:
            try:
                s = socket.create_connection((addr, port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with s:
            s.settimeout(60)
            chunk = b"x" * (1 << 20)
            sent = 0
            while sent < n:
                sent += s.send(chunk[: min(len(chunk), n - sent)])
        return 0
    if mode == "listen":
        with socket.create_server(("0.0.0.0", int(argv[1]))) as srv:
            while True:
                conn, _ = srv.accept()
                conn.close()
    if mode == "connect":
        addr, port, timeout = argv[1], int(argv[2]), float(argv[3])
        t0 = time.monotonic()
        try:
            socket.create_connection((addr, port), timeout=timeout).close()
            ok, err = True, ""
        except OSError as e:
            ok, err = False, repr(e)
        print(json.dumps({"ok": ok, "seconds": time.monotonic() - t0, "error": err}))
        return 0 if ok else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
