#!/usr/bin/env python3
"""nettool.py: the few network probes the multi-node tests need, with nothing but the
standard library (the bed has no ping, iperf or nc).
  nettool.py ping ADDR                 ICMP echo (raw socket, root); exit 0 on a reply
  nettool.py unreachable ADDR PORT     exit 0 if a TCP connect fails with "no route"
  nettool.py sink PORT                 take one connection, print the rate it arrived at
  nettool.py send ADDR PORT MBYTES     connect (retrying up to 10 s) and send MBYTES MiB
  nettool.py stranger ADDR PORT        connect, send junk instead of the job token, report
                                       whether the server closed the connection
  nettool.py replies PORT ROUNDS KIB   take one connection; after each KIB KiB read, answer
                                       with the monotonic clock (the nodes share the kernel's)
  nettool.py serve ROUNDS KIB ADDR:PORT...  a server answering several peers: each round,
                                       KIB KiB to each peer in turn; prints each peer's median
                                       arrival after the round began, in ms
Every wait has a timeout. Read next: bed_test.sh."""
import errno
import os
import socket
import struct
import sys
import time


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(addr):
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.settimeout(2.0)
    ident = os.getpid() & 0xFFFF
    payload = b"dplab-netns-bed"
    header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
    packet = struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, 1) + payload
    t0 = time.monotonic()
    sock.sendto(packet, (addr, 0))
    deadline = t0 + 2.0
    while time.monotonic() < deadline:
        try:
            data, src = sock.recvfrom(2048)
        except socket.timeout:
            break
        icmp = data[(data[0] & 0x0F) * 4:]
        typ, _, _, rid, _ = struct.unpack("!BBHHH", icmp[:8])
        if typ == 0 and rid == ident and src[0] == addr:
            print("reply from %s in %.3f ms" % (addr, (time.monotonic() - t0) * 1e3))
            return 0
    print("no reply from %s within 2 s" % addr)
    return 1


def unreachable(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect((addr, int(port)))
    except OSError as e:
        if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            print("%s:%s unreachable: %s" % (addr, port, os.strerror(e.errno)))
            return 0
        print("%s:%s: expected 'no route', got %r" % (addr, port, e))
        return 1
    print("%s:%s: REACHED, expected no route" % (addr, port))
    return 1


def accept_one(port):
    """Listens on PORT and takes one connection (within 15 s): (socket, peer address)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", int(port)))
    srv.listen(1)
    srv.settimeout(15.0)
    conn, peer = srv.accept()
    conn.settimeout(15.0)
    return conn, peer


def sink(port):
    conn, peer = accept_one(port)
    total, first = 0, None
    while True:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        if first is None:
            first = time.monotonic()
        total += len(chunk)
    seconds = time.monotonic() - first
    print("received %d bytes from %s in %.3f s: %.1f Mbit/s" %
          (total, peer[0], seconds, total * 8 / seconds / 1e6))
    return 0


def connect_retrying(addr, port, within=10.0):
    deadline = time.monotonic() + within
    while True:
        try:
            return socket.create_connection((addr, int(port)), timeout=5.0)
        except (ConnectionRefusedError, socket.timeout):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def send(addr, port, mbytes):
    s = connect_retrying(addr, port)
    s.sendall(b"\xa5" * (int(mbytes) << 20))
    s.shutdown(socket.SHUT_WR)
    s.settimeout(15.0)
    s.recv(1)  # the sink closes after reading everything
    return 0


def stranger(addr, port):
    s = connect_retrying(addr, port)
    s.settimeout(15.0)
    try:
        s.recv(4096)  # the server's challenge
        s.sendall(b"\0\0\0\x40" + b"not-the-job-token" * 8)
        while s.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    print("the store at %s:%s closed the connection" % (addr, port))
    return 0


def recv_exactly(conn, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = conn.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("closed after %d of %d bytes" % (got, n))
        got += k
    return bytes(buf)


def replies(port, rounds, kib):
    conn, _ = accept_one(port)
    for _ in range(int(rounds)):
        recv_exactly(conn, int(kib) << 10)
        conn.sendall(struct.pack("d", time.monotonic()))
    return 0


def serve(rounds, kib, *peers):
    conns = [connect_retrying(*p.split(":")) for p in peers]
    for c in conns:
        c.settimeout(15.0)
    data = b"\x5a" * (int(kib) << 10)
    arrivals = [[] for _ in conns]
    for _ in range(int(rounds)):
        start = time.monotonic()
        for c in conns:
            c.sendall(data)
        for i, c in enumerate(conns):
            arrivals[i].append(struct.unpack("d", recv_exactly(c, 8))[0] - start)
        time.sleep(0.02)  # the links idle between rounds, as between training steps
    print(" ".join("%.2f" % (1e3 * sorted(a)[len(a) // 2]) for a in arrivals))
    return 0


if __name__ == "__main__":
    cmds = {"ping": ping, "unreachable": unreachable, "sink": sink, "send": send,
            "stranger": stranger, "replies": replies, "serve": serve}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(cmds[sys.argv[1]](*sys.argv[2:]))
