"""An origin for the HTTP cache's tests: counts the requests for each path, and answers as
the query asks.

  cc=VALUE      Cache-Control          etag=TAG     ETag (and 304 to a matching If-None-Match)
  lm=SECS       Last-Modified          vary=NAMES   Vary (the body then names the values)
  size=N        a body of N bytes      cookie=1     Set-Cookie
  delay=MS      wait before answering  status=N    the status
  chunked=1     a chunked body         expires=S    Expires, S seconds from now
  break=1       close after half the body   age=S        Age

GET /__count?p=PATH answers how many requests PATH had; the first line on stdout is the
port.
"""

import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

COUNTS = {}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The head and the body are separate writes: without this, Nagle holds the body until
    # the head's ACK, which the proxy's delayed ACK holds for 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def answer(self, with_body):
        u = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        if u.path == "/__count":
            with LOCK:
                n = COUNTS.get(q.get("p", ""), 0)
            body = str(n).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)
            return
        with LOCK:
            COUNTS[u.path] = COUNTS.get(u.path, 0) + 1
            n = COUNTS[u.path]
        if "delay" in q:
            time.sleep(int(q["delay"]) / 1000)
        etag = q.get("etag")
        status = int(q.get("status", "200"))
        inm = self.headers.get("If-None-Match")
        if etag and inm and etag in [t.strip() for t in inm.split(",")]:
            self.send_response(304)
            if "cc" in q:
                self.send_header("Cache-Control", q["cc"])
            self.send_header("ETag", etag)
            self.send_header("X-Origin-Count", str(n))
            self.end_headers()
            return
        if "size" in q:
            body = (b"0123456789abcdef" * (int(q["size"]) // 16 + 1))[: int(q["size"])]
        else:
            body = ("%s %s #%d" % (self.command, u.path, n)).encode()
            if "vary" in q:
                for name in q["vary"].split(","):
                    body += (" %s=%s" % (name.strip(), self.headers.get(name.strip(), ""))).encode()
        self.send_response(status)
        if "cc" in q:
            self.send_header("Cache-Control", q["cc"])
        if etag:
            self.send_header("ETag", etag)
        if "lm" in q:
            self.send_header("Last-Modified", formatdate(int(q["lm"]), usegmt=True))
        if "expires" in q:
            self.send_header("Expires", formatdate(time.time() + int(q["expires"]), usegmt=True))
        if "vary" in q:
            self.send_header("Vary", q["vary"])
        if "age" in q:
            self.send_header("Age", q["age"])
        if q.get("cookie") == "1":
            self.send_header("Set-Cookie", "s=1")
        self.send_header("X-Origin-Count", str(n))
        self.send_header("Content-Type", "text/plain")
        if q.get("chunked") == "1":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if with_body:
                half = len(body) // 2
                for part in (body[:half], body[half:]):
                    if part:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.flush()
                        if q.get("break") == "1":
                            self.close_connection = True
                            return
                self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            if q.get("break") == "1":
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    def do_GET(self):
        self.answer(True)

    def do_HEAD(self):
        self.answer(False)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        if n:
            self.rfile.read(n)
        self.answer(True)

    do_PUT = do_POST
    do_DELETE = do_POST


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
