"""An upstream for crates/selvedge-server/tests/balance.rs: answers its own name, slowly if
asked, and a health status that the test can change.

usage: python3 pool_upstream.py NAME DELAY_SECONDS STATE_DIR

Prints its port on the first line of stdout, then serves HTTP/1.1 keep-alive on 127.0.0.1
(one thread per connection). Every request line is appended to STATE_DIR/NAME.log.

  GET /health   the status in STATE_DIR/NAME.health (200 if the file is missing)
  /drop         reads the request (and its body), then closes without an answer
  /busy         503 "NAME busy"
  anything else 200, body = NAME, after DELAY_SECONDS
"""

import http.server
import os
import socketserver
import sys
import threading
import time

NAME, DELAY, STATE = sys.argv[1], float(sys.argv[2]), sys.argv[3]
LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        with LOCK:
            with open(os.path.join(STATE, NAME + ".log"), "a") as f:
                f.write(f"{self.command} {self.path}\n")
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.path == "/health":
            try:
                with open(os.path.join(STATE, NAME + ".health")) as f:
                    status = int(f.read().strip())
            except (OSError, ValueError):
                status = 200
            self.answer(status, NAME + " health\n")
        elif self.path == "/drop":
            self.close_connection = True
            self.connection.close()
        elif self.path == "/busy":
            self.answer(503, NAME + " busy")
        else:
            if DELAY:
                time.sleep(DELAY)
            self.answer(200, NAME)

    do_GET = do_POST = do_PUT = do_DELETE = handle_any


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


srv = Server(("127.0.0.1", 0), Handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
