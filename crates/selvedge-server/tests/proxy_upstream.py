"""A scripted HTTP/1.1 upstream for crates/selvedge-server/tests/proxy.rs.

usage: python3 proxy_upstream.py PORT|/unix/path CAPTURE_FILE

Prints its port on the first line of stdout, then serves keep-alive HTTP/1.1 on raw sockets
(no library parsing, so what arrives is exactly what the proxy sent). Every byte received is
appended to CAPTURE_FILE. The path picks the behaviour:

  /headers      200, body = the request head exactly as received
  /stats        200, body = number of connections accepted so far
  /slow         200 after 0.3 s
  /hold         200 once CAPTURE_FILE.release exists (at most 30 s)
  /stall        never answers
  /stall-body   a head announcing 1 MB and 10 bytes of body, then nothing
  /die          a head announcing 10 MB, 100 KB of body, then the process kills itself
  /chunked      a chunked body (with a trailer)
  /big          3 MB with Content-Length
  /continue     100 Continue and 103 Early Hints, then 200 "after-continue"
  /early        413 and close, without reading the request body
  /bad-cl       two different Content-Length fields
  /te-cl        Transfer-Encoding and Content-Length
  /fold         an obs-folded field
  /close        a body delimited by closing the connection
  /once         answered on a new connection; on a reused one, the connection is closed
                without an answer (an upstream whose keep-alive timeout just ran out)
  anything else 200, body = the request body (echo), X-Conn = connection number
"""

import os
import signal
import socket
import socketserver
import sys
import threading
import time

CAPTURE = sys.argv[2]
LOCK = threading.Lock()
CONNS = [0]


def capture(data):
    with LOCK:
        with open(CAPTURE, "ab") as f:
            f.write(data)


class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def fill(self):
        d = self.sock.recv(1 << 16)
        if not d:
            raise EOFError
        capture(d)
        self.buf += d

    def line(self):
        while b"\r\n" not in self.buf:
            self.fill()
        i = self.buf.index(b"\r\n")
        out = bytes(self.buf[:i])
        del self.buf[: i + 2]
        return out

    def exactly(self, n):
        while len(self.buf) < n:
            self.fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def head(self):
        while b"\r\n\r\n" not in self.buf:
            self.fill()
        i = self.buf.index(b"\r\n\r\n")
        raw = bytes(self.buf[: i + 4])
        del self.buf[: i + 4]
        lines = raw[:-4].split(b"\r\n")
        method, target, _ = lines[0].split(b" ", 2)
        fields = {}
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            fields.setdefault(k.strip().lower(), []).append(v.strip())
        return raw, method.decode(), target.decode(), fields

    def body(self, fields):
        if b"transfer-encoding" in fields:
            out = bytearray()
            while True:
                size = int(self.line().split(b";")[0], 16)
                if size == 0:
                    while self.line() != b"":
                        pass
                    return bytes(out)
                out += self.exactly(size)
                assert self.exactly(2) == b"\r\n"
        n = int(fields.get(b"content-length", [b"0"])[0])
        return self.exactly(n)


def respond(sock, status, body=b"", extra=b"", head_only=False):
    msg = b"HTTP/1.1 %s\r\nContent-Length: %d\r\n%s\r\n" % (status, len(body), extra)
    sock.sendall(msg if head_only else msg + body)


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        with LOCK:
            CONNS[0] += 1
            n = CONNS[0]
        sock = self.request
        c = Conn(sock)
        served = 0
        try:
            while True:
                raw, method, target, fields = c.head()
                path = target.split("?")[0]
                if path == "/once" and served > 0:
                    return
                served += 1
                head_only = method == "HEAD"
                if path == "/early":
                    sock.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 5\r\nConnection: close\r\n\r\nearly")
                    time.sleep(0.5)
                    return
                body = c.body(fields)
                if path.endswith("/headers"):
                    respond(sock, b"200 OK", raw, head_only=head_only)
                elif path == "/stats":
                    respond(sock, b"200 OK", str(CONNS[0]).encode())
                elif path == "/slow":
                    time.sleep(0.3)
                    respond(sock, b"200 OK", b"slow")
                elif path == "/hold":
                    for _ in range(600):
                        if os.path.exists(CAPTURE + ".release"):
                            break
                        time.sleep(0.05)
                    respond(sock, b"200 OK", b"held")
                elif path == "/stall-body":
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n0123456789")
                    time.sleep(30)
                    return
                elif path == "/stall":
                    time.sleep(30)
                    return
                elif path == "/die":
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 100000)
                    time.sleep(0.2)
                    os.kill(os.getpid(), signal.SIGKILL)
                elif path == "/chunked":
                    sock.sendall(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
                    )
                elif path == "/big":
                    respond(sock, b"200 OK", bytes(range(256)) * (3 * 4096), head_only=head_only)
                elif path == "/continue":
                    sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n")
                    time.sleep(0.05)
                    respond(sock, b"200 OK", b"after-continue")
                elif path == "/bad-cl":
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok")
                elif path == "/te-cl":
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
                elif path == "/fold":
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: a\r\n b\r\n\r\nok")
                elif path == "/close":
                    sock.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil-close")
                    return
                else:
                    extra = b"X-Conn: %d\r\nX-Method: %s\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n" % (
                        n,
                        method.encode(),
                    )
                    respond(sock, b"200 OK", body, extra, head_only=head_only)
        except (EOFError, ConnectionError, OSError):
            return


class Tcp(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class Unix(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


if __name__ == "__main__":
    where = sys.argv[1]
    if where.startswith("/"):
        srv = Unix(where, Handler)
        port = 0
    else:
        srv = Tcp(("127.0.0.1", int(where)), Handler)
        port = srv.server_address[1]
    print(port, flush=True)
    srv.serve_forever()
