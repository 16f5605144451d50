"""An authentication service for crates/selvedge-server/tests/forward_auth.rs.

usage: python3 auth_service.py

Prints its port on the first line of stdout, then answers every GET (HTTP/1.1, keep-alive):

  Cookie session=good or Authorization "Bearer good"
                       200, Remote-User: alice, Remote-Groups: admins, X-Seen: its path, then
                       X-Forwarded-Method, -Uri, Host, X-Original-Method, -URL
  Cookie session=forbidden
                       403 "forbidden"
  X-Forwarded-Uri under /private, without Cookie session=admin
                       403 "private"
  X-Want: redirect     302 to https://login.example/?rd=<X-Forwarded-Uri>
  X-Want: boom         500
  X-Want: slow         200 after 3 s
  anything else        401 with WWW-Authenticate: Bearer
  GET /count           the number of checks answered so far
"""

import http.server
import sys
import threading
import time

COUNT = [0]
LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", fields=()):
        self.send_response(status)
        for n, v in fields:
            self.send_header(n, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/count":
            return self.answer(200, str(COUNT[0]).encode())
        with LOCK:
            COUNT[0] += 1
        cookie = self.headers.get("Cookie", "")
        authz = self.headers.get("Authorization", "")
        want = self.headers.get("X-Want", "")
        seen = "%s %s %s %s %s %s" % (
            self.path,
            self.headers.get("X-Forwarded-Method"),
            self.headers.get("X-Forwarded-Uri"),
            self.headers.get("Host"),
            self.headers.get("X-Original-Method"),
            self.headers.get("X-Original-URL"),
        )
        if self.headers.get("X-Forwarded-Uri", "").startswith("/private") and "session=admin" not in cookie:
            return self.answer(403, b"private")
        if want == "slow":
            time.sleep(3)
            return self.answer(200, b"late")
        if want == "boom":
            return self.answer(500, b"boom")
        if want == "redirect":
            rd = self.headers.get("X-Forwarded-Uri", "")
            return self.answer(302, b"", [("Location", "https://login.example/?rd=" + rd)])
        if "session=good" in cookie or authz == "Bearer good":
            return self.answer(
                200, b"ok", [("Remote-User", "alice"), ("Remote-Groups", "admins"), ("X-Seen", seen)]
            )
        if "session=forbidden" in cookie:
            return self.answer(403, b"forbidden", [("Content-Type", "text/plain")])
        return self.answer(401, b"who are you", [("WWW-Authenticate", "Bearer")])


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
