#!/usr/bin/env python3
"""nettool.py: the few network probes the multi-node tests need, with nothing but the
standard library (the bed has no ping, iperf or nc).
  nettool.py ping ADDR                 ICMP echo (raw socket, root); exit 0 on a reply
  nettool.py unreachable ADDR PORT     exit 0 if a TCP connect fails with "no route"
  nettool.py sink PORT                 take one connection, read it to the end, print the
                                       kernel's arrival times of its first and last byte
  nettool.py send ADDR PORT MBYTES     connect (retrying up to 10 s) and send MBYTES MiB
  nettool.py stranger ADDR PORT        connect, send junk instead of the job token, report
                                       whether the server closed the connection
  nettool.py replies PORT ROUNDS KIB   take one connection; after each KIB KiB read, answer
                                       with the kernel's arrival times of its first and last byte
  nettool.py serve ROUNDS KIB ADDR:PORT...  a server answering several peers: each round,
                                       KIB KiB to each peer in turn; prints when each peer's
                                       reply was in (medians, in ms, kernel times; below)
Times that decide a test are the kernel's, not this program's: a receiving socket asks for
receive timestamps (SO_TIMESTAMPNS), stamped when a packet reaches the node's stack, and reads
in small pieces, so each read reports when the last packet it took arrived. A reader that a
busy machine schedules late still reads the times the bytes came, and its receive buffer is
made large enough (SO_RCVBUFFORCE, before accept, so the window scale allows it) that the
sender never waits on it. The nodes share one kernel, so its clock (CLOCK_REALTIME) is one.
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


WAIT_S = 10.0  # a guard: a reply the kernel has queued is read however late this runs


def ping(addr):
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.settimeout(WAIT_S)
    ident = os.getpid() & 0xFFFF
    payload = b"dplab-netns-bed"
    header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
    packet = struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, 1) + payload
    t0 = time.monotonic()
    sock.sendto(packet, (addr, 0))
    deadline = t0 + WAIT_S
    while True:
        try:
            data, src = sock.recvfrom(2048)
        except socket.timeout:
            break
        icmp = data[(data[0] & 0x0F) * 4:]
        typ, _, _, rid, _ = struct.unpack("!BBHHH", icmp[:8])
        if typ == 0 and rid == ident and src[0] == addr:
            print("reply from %s in %.3f ms" % (addr, (time.monotonic() - t0) * 1e3))
            return 0
        if time.monotonic() > deadline:
            break
    print("no reply from %s within %.0f s" % (addr, WAIT_S))
    return 1


def unreachable(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(WAIT_S)
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


# <asm-generic/socket.h>; Python's socket module does not name them
SO_SNDBUFFORCE, SO_RCVBUFFORCE, SO_TIMESTAMPNS = 32, 33, 35
BIG_BUFFER = 32 << 20  # more than any test sends in one go: nobody waits for a reader


def accept_one(port, stamped=False):
    """Listens on PORT and takes one connection (within 15 s): (socket, peer address).
    stamped: the connection gets a large receive buffer and kernel receive timestamps, both
    set on the listening socket: the handshake then offers the window scale for that buffer,
    and the kernel turns its timestamping on (asynchronously) before the peer connects."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if stamped:
        srv.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BIG_BUFFER)
        srv.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    srv.bind(("0.0.0.0", int(port)))
    srv.listen(1)
    srv.settimeout(15.0)
    conn, peer = srv.accept()
    conn.settimeout(15.0)
    return conn, peer


def recv_stamped(conn, limit):
    """One read of at most `limit` bytes: (bytes, the kernel's arrival time in ns of the last
    packet it took, or 0 for a packet that came before the kernel's timestamping was on).
    b"" at the end of the stream."""
    data, ancillary, _, _ = conn.recvmsg(limit, socket.CMSG_SPACE(16))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", payload[:16])
            return data, sec * 1_000_000_000 + nsec
    return data, 0


PIECE = 16 << 10  # a quarter of the largest packet the bed sends (64 KiB at 1 Gbit/s)


def arrival_of(conn, n):
    """Reads exactly n bytes: the kernel's arrival times (ns) of the first byte (a read of
    one byte) and of the last (the last read ends on it); 0 for one without a timestamp."""
    first = last = None
    got = 0
    while got < n:
        data, stamp = recv_stamped(conn, 1 if got == 0 else min(PIECE, n - got))
        if not data:
            raise ConnectionError("closed after %d of %d bytes" % (got, n))
        first = stamp if first is None else first
        last = stamp
        got += len(data)
    return first, last


def sink(port):
    """Reads one connection to its end. The rate counts from the first byte with a
    timestamp (the first packets may come before the kernel's timestamping is on)."""
    conn, peer = accept_one(port, stamped=True)
    total, counted, first, last = 0, 0, 0, 0
    while True:
        data, stamp = recv_stamped(conn, 1 if total == 0 else PIECE)
        if not data:
            break
        total += len(data)
        if first:
            counted += len(data)
        elif stamp:
            first = stamp  # this read's last packet: count the bytes after it
        last = stamp
    if not (first and last and counted):
        print("received %d bytes from %s, without the kernel's receive timestamps "
              "(SO_TIMESTAMPNS)" % (total, peer[0]))
        return 1
    seconds = (last - first) / 1e9
    print("received %d bytes from %s; the last %d came in %.3f s after the first stamped "
          "read (kernel times): %.1f Mbit/s" %
          (total, peer[0], counted, seconds, counted * 8 / seconds / 1e6))
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
    conn, _ = accept_one(port, stamped=True)
    for _ in range(int(rounds) * SERVE_ROUNDS_PER_JUDGED):
        try:
            first, last = arrival_of(conn, int(kib) << 10)
        except ConnectionError:
            return 0  # the server had judged enough rounds
        conn.sendall(struct.pack("qq", first, last))  # 0: no timestamp
    return 0


SERVE_WARMUP = 2  # rounds while TCP's window still grows: not judged
SERVE_ROUNDS_PER_JUDGED = 10  # at most this many rounds in all per round to judge
# A round is judged if the server handed all its replies to the kernel before half of the
# first had arrived: a server scheduled out between its writes starts a later reply late,
# and then even a link that takes turns would seem to send in order.


def median(v):
    return sorted(v)[len(v) // 2]


def serve(rounds, kib, *peers):
    """Each round: KIB KiB to each peer in turn (handed to the kernel at once: the socket's
    send buffer holds it all), then each peer's arrival times. From the kernel's times: when
    each peer's last byte came, after the round's first byte on any link, and the gap between
    one peer's last byte and the next one's. Prints one line: those medians in ms (k times,
    k-1 gaps), then the rounds judged and run."""
    conns = [connect_retrying(*p.split(":")) for p in peers]
    for c in conns:
        c.settimeout(15.0)
        c.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, BIG_BUFFER)
    data = b"\x5a" * (int(kib) << 10)
    done, ran, judged = [], 0, int(rounds)
    while len(done) < judged and ran < judged * SERVE_ROUNDS_PER_JUDGED:
        start = time.monotonic()
        for c in conns:
            c.sendall(data)
        handoff = time.monotonic() - start
        stamps = [struct.unpack("qq", recv_exactly(c, 16)) for c in conns]
        ran += 1
        if not all(f and l for f, l in stamps):
            continue  # before the receivers' kernel stamped packets: a warm-up round
        first = min(f for f, _ in stamps)
        ends = [(last - first) / 1e6 for _, last in stamps]
        if os.environ.get("NETTOOL_VERBOSE"):  # every round, to see a spread for what it is
            print("round %d: handed over in %.2f ms; last bytes after %s ms" %
                  (ran, 1e3 * handoff, " ".join("%.2f" % e for e in ends)), file=sys.stderr)
        if ran > SERVE_WARMUP and handoff < ends[0] / 2e3:
            done.append(ends)
        time.sleep(0.02)  # the links idle between rounds, as between training steps
    if not done:
        print("no round to judge: in each of %d the server took longer to hand its replies "
              "to the kernel than half the first took to arrive" % ran, file=sys.stderr)
        return 1
    ends = [median([r[i] for r in done]) for i in range(len(conns))]
    gaps = [median([r[i + 1] - r[i] for r in done]) for i in range(len(conns) - 1)]
    print(" ".join("%.2f" % x for x in ends + gaps), len(done), ran)
    return 0


if __name__ == "__main__":
    cmds = {"ping": ping, "unreachable": unreachable, "sink": sink, "send": send,
            "stranger": stranger, "replies": replies, "serve": serve}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(cmds[sys.argv[1]](*sys.argv[2:]))
