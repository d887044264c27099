#!/usr/bin/env python3
"""Stalled HTTP clients against eplbd (issue 33, F3), standard library only.

usage: slow_clients.py PORT SOURCES N REQUESTS

Opens N connections to 127.0.0.1:PORT from the loopback addresses SOURCES
(comma-separated, e.g. 127.0.0.2,127.0.0.3 or 127.0.0.1), each sending the
start of a request and then one more header byte every 0.5 s, and opening
again when the server closes it (as an attacker would). Meanwhile it sends
REQUESTS health checks and scrapes (/healthz and /metrics in turn) from
127.0.0.1, one at a time, and prints one line:
  answered A of REQUESTS; worst S s; stalled N, closed by the server C
Exit status 0 when every request was answered with 200 within 3 s.
"""
import socket
import sys
import threading
import time
import urllib.request

DRIP_S = 0.5
REQUEST_TIMEOUT_S = 3.0
PHASE_LIMIT_S = 12.0  # stop asking (and count the rest unanswered) past this


def connect(port, src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    s.setblocking(False)
    return s


def main(argv):
    port, sources, n, requests = int(argv[1]), argv[2].split(","), int(argv[3]), int(argv[4])
    clients = []
    for i in range(n):
        src = sources[i % len(sources)]
        try:
            clients.append([src, connect(port, src)])
        except OSError:
            clients.append([src, None])
    done = threading.Event()
    closed = [0]

    def drip():
        while not done.wait(DRIP_S):
            for c in clients:
                try:
                    if c[1] is None:
                        raise OSError
                    # Reading 0 bytes: the server closed it.
                    try:
                        if c[1].recv(1) == b"":
                            raise OSError
                    except BlockingIOError:
                        pass
                    c[1].send(b"a")
                except OSError:
                    closed[0] += 1
                    if c[1] is not None:
                        c[1].close()
                    try:
                        c[1] = connect(port, c[0])
                    except OSError:
                        c[1] = None

    t = threading.Thread(target=drip)
    t.start()
    time.sleep(1.0)  # the clients have dripped twice: alive, not idle
    answered, worst, t_start = 0, 0.0, time.monotonic()
    for i in range(requests):
        if time.monotonic() - t_start > PHASE_LIMIT_S:
            break
        path = "/healthz" if i % 2 == 0 else "/metrics"
        t0 = time.monotonic()
        try:
            r = urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                       timeout=REQUEST_TIMEOUT_S)
            r.read()
            ok = r.status == 200
        except Exception:  # refused, reset or timed out: unanswered
            ok = False
        dt = time.monotonic() - t0
        worst = max(worst, dt)
        answered += ok and dt <= REQUEST_TIMEOUT_S
    done.set()
    t.join()
    for c in clients:
        if c[1] is not None:
            c[1].close()
    print("answered %d of %d; worst %.2f s; stalled %d, closed by the server %d"
          % (answered, requests, worst, n, closed[0]))
    return 0 if answered == requests else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
