#!/usr/bin/env python3
"""An HTTP/3 test client on aioquic, for selvedge's HTTP/3 tests and bench/h3.sh.

Usage: h3_client.py HOST PORT MODE [ARGS...]; prints one JSON object on stdout.

Modes:
  get PATH...            the paths, all at once on one connection: status, headers,
                         length and sha256 of each body
  post PATH SIZE         POSTs SIZE bytes (a fixed pseudo-random pattern) and reports the
                         answer's length and sha256, and the sha256 of what was sent
  many PATH N            N concurrent GETs of PATH on one connection
  over_limit PATH N      opens N request streams at once, ignoring the server's stream
                         limit: reports how the connection was closed
  big_header PATH SIZE   one request with a SIZE-byte header value
  stall PATH SECS        POST with content-length 1000000 and 10 bytes of body, then
                         nothing for SECS: reports the stream's STOP_SENDING/RESET codes
  silent SECS            completes the handshake, then sends nothing (no ACKs either) for
                         SECS, then tries a request: reports what happened
  twice PATH SECS        a GET, SECS of quiet, another GET on the same connection
  cert                   the SHA-256 of the certificate the server presented
  raw CASE               bytes no conforming client sends, written straight on QUIC
                         streams: data_first (DATA before HEADERS), reserved_frame (an
                         HTTP/2 frame type), dynamic_ref (a QPACK dynamic reference),
                         uppercase (an upper-case field name), no_authority and
                         empty_authority (neither `:authority` nor `host`, an empty
                         `:authority`), push_stream (a push stream
                         from the client), second_control (a second control stream),
                         cancel_push (CANCEL_PUSH to a server that never pushed),
                         qpack_insert (a QPACK insert into a table of capacity 0),
                         cl_long and cl_short (a POST body longer or shorter than its
                         content-length), bad_trailers (a trailer section with a
                         pseudo-field), empty_open (content-length 0, the stream left
                         open): reports how the connection or the stream was closed
  bench PATH N CONNS     N GETs of PATH over CONNS connections, CONNS at a time: requests/s
"""

import asyncio
import hashlib
import json
import ssl
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StopSendingReceived, StreamReset


def pattern(size):
    block = hashlib.sha256(b"selvedge").digest() * 2048  # 64 KiB
    out = bytearray()
    while len(out) < size:
        out += block
    return bytes(out[:size])


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.h3 = H3Connection(self._quic)
        self.streams = {}
        self.closed = None
        self.waiters = []

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.closed = {"error_code": event.error_code, "frame_type": event.frame_type,
                           "reason": event.reason_phrase}
            for s in self.streams.values():
                if not s["done"].done():
                    s["done"].set_result(None)
        if isinstance(event, (StopSendingReceived, StreamReset)):
            s = self.streams.get(event.stream_id)
            if s is not None:
                key = "stop_sending" if isinstance(event, StopSendingReceived) else "reset"
                s[key] = event.error_code
                if key == "reset" and not s["done"].done():
                    s["done"].set_result(None)
        for ev in self.h3.handle_event(event):
            s = self.streams.get(ev.stream_id)
            if s is None:
                continue
            if isinstance(ev, HeadersReceived):
                s["headers"] = [(k.decode(), v.decode()) for k, v in ev.headers]
            elif isinstance(ev, DataReceived):
                s["body"].update(ev.data)
                s["len"] += len(ev.data)
            if getattr(ev, "stream_ended", False) and not s["done"].done():
                s["done"].set_result(None)

    def start(self, method, path, headers=(), body=None, end=True):
        sid = self._quic.get_next_available_stream_id()
        self.streams[sid] = {"headers": None, "body": hashlib.sha256(), "len": 0,
                             "done": self._loop.create_future()}
        hs = [(b":method", method.encode()), (b":scheme", b"https"),
              (b":authority", b"localhost"), (b":path", path.encode())]
        hs += [(k.encode(), v.encode()) for k, v in headers]
        self.h3.send_headers(sid, hs, end_stream=(body is None and end))
        if body is not None:
            self.h3.send_data(sid, body, end_stream=end)
        self.transmit()
        return sid

    def result(self, sid):
        s = self.streams[sid]
        out = {"headers": s["headers"], "len": s["len"], "sha256": s["body"].hexdigest()}
        if s["headers"]:
            out["status"] = int(dict(s["headers"])[":status"])
        for k in ("stop_sending", "reset"):
            if k in s:
                out[k] = s[k]
        return out

    async def wait(self, sids, timeout=60):
        await asyncio.wait_for(asyncio.gather(*(self.streams[s]["done"] for s in sids)), timeout)


def qpack_get(extra=b"", prefix=b"\x00\x00", authority=b"\x50\x09localhost"):
    """A HEADERS frame for GET https://localhost/, QPACK with static references only."""
    block = prefix + b"\xd1\xd7" + authority + b"\xc1" + extra
    return bytes([0x01, len(block)]) + block


def qpack_post(path, length):
    """A HEADERS frame for POST https://localhost/PATH with content-length LENGTH."""
    cl = str(length).encode()
    block = (b"\x00\x00\xd4\xd7\x50\x09localhost\x51" + bytes([len(path)]) + path.encode()
             + b"\x54" + bytes([len(cl)]) + cl)
    return bytes([0x01, len(block)]) + block


def h3_frame(kind, payload):
    return bytes([kind, len(payload)]) + payload


async def raw(c, case):
    q = c._quic
    sid = None
    if case in ("cl_long", "cl_short", "bad_trailers", "empty_open"):
        sid = q.get_next_available_stream_id()
        c.streams[sid] = {"headers": None, "body": hashlib.sha256(), "len": 0,
                          "done": c._loop.create_future()}
        data, end = {
            "cl_long": (qpack_post("/read", 5) + h3_frame(0, b"hello!"), False),
            "cl_short": (qpack_post("/read", 5) + h3_frame(0, b"abc"), True),
            "bad_trailers": (qpack_post("/read", 5) + h3_frame(0, b"hello") + h3_frame(1, b"\x00\x00\xc1"), True),
            "empty_open": (qpack_post("/", 0), False),
        }[case]
        q.send_stream_data(sid, data, end_stream=end)
    elif case in ("data_first", "reserved_frame", "dynamic_ref", "uppercase", "no_authority", "empty_authority"):
        sid = q.get_next_available_stream_id()
        c.streams[sid] = {"headers": None, "body": hashlib.sha256(), "len": 0,
                          "done": c._loop.create_future()}
        data = {
            "data_first": b"\x00\x01x" + qpack_get(),
            "reserved_frame": b"\x02\x00" + qpack_get(),
            "dynamic_ref": qpack_get(prefix=b"\x01\x00"),
            "uppercase": qpack_get(extra=b"\x24X-Up\x01v"),
            "no_authority": qpack_get(authority=b""),
            "empty_authority": qpack_get(authority=b"\xc0"),
        }[case]
        q.send_stream_data(sid, data, end_stream=True)
    elif case == "cancel_push":
        q.send_stream_data(c.h3._local_control_stream_id, b"\x03\x01\x00")
    elif case == "qpack_insert":
        # Insert with literal name "a: b" (RFC 9204 §4.3.3).
        q.send_stream_data(c.h3._local_encoder_stream_id, b"\x41a\x01b")
    else:
        uni = q.get_next_available_stream_id(is_unidirectional=True)
        data = {"push_stream": b"\x01\x00", "second_control": b"\x00\x04\x00"}[case]
        q.send_stream_data(uni, data, end_stream=False)
    c.transmit()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5 and c.closed is None:
        if sid is not None and c.streams[sid]["done"].done():
            break
        await asyncio.sleep(0.02)
    out = c.result(sid) if sid is not None else {}
    out["closed"] = c.closed
    return out


def config():
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    c.verify_mode = ssl.CERT_NONE
    c.server_name = "localhost"
    c.idle_timeout = 30
    return c


async def main(host, port, mode, args):
    out = {}
    async with connect(host, port, configuration=config(), create_protocol=Client) as c:
        if mode == "get":
            sids = [c.start("GET", p) for p in args]
            await c.wait(sids)
            out["responses"] = [c.result(s) for s in sids]
            out["retries"] = c._quic._retry_count
        elif mode == "post":
            body = pattern(int(args[1]))
            sid = c.start("POST", args[0], [("content-length", str(len(body)))], body)
            await c.wait([sid])
            out = c.result(sid)
            out["sent_sha256"] = hashlib.sha256(body).hexdigest()
        elif mode == "many":
            sids = [c.start("GET", args[0]) for _ in range(int(args[1]))]
            await c.wait(sids)
            out["statuses"] = [c.result(s).get("status") for s in sids]
            out["stream_ids"] = sids
        elif mode == "over_limit":
            c._quic._remote_max_streams_bidi = 1 << 20  # pretend the server allowed it
            sids = [c.start("GET", args[0]) for _ in range(int(args[1]))]
            try:
                await c.wait(sids, 10)
            except asyncio.TimeoutError:
                pass
            out["closed"] = c.closed
        elif mode == "big_header":
            sid = c.start("GET", args[0], [("x-big", "a" * int(args[1]))])
            await c.wait([sid], 10)
            out = c.result(sid)
            out["closed"] = c.closed
        elif mode == "stall":
            sid = c.start("POST", args[0], [("content-length", "1000000")], b"0123456789", end=False)
            t0 = time.monotonic()
            deadline = t0 + float(args[1])
            while time.monotonic() < deadline and not c.streams[sid]["done"].done():
                await asyncio.sleep(0.05)
            out = c.result(sid)
            out["after"] = round(time.monotonic() - t0, 2)
            out["closed"] = c.closed
        elif mode == "silent":
            # Stop sending anything at all: the transport drops every datagram.
            real = c._transport.sendto
            c._transport.sendto = lambda *a, **k: None
            await asyncio.sleep(float(args[0]))
            c._transport.sendto = real
            sid = c.start("GET", "/")
            try:
                await c.wait([sid], 5)
            except asyncio.TimeoutError:
                pass
            out = c.result(sid)
            out["closed"] = c.closed
        elif mode == "twice":
            statuses = []
            for i in range(2):
                sid = c.start("GET", args[0])
                await c.wait([sid])
                statuses.append(c.result(sid).get("status"))
                if i == 0:
                    await asyncio.sleep(float(args[1]))
            out = {"statuses": statuses, "closed": c.closed}
        elif mode == "raw":
            out = await raw(c, args[0])
        elif mode == "cert":
            from cryptography.hazmat.primitives.serialization import Encoding
            der = c._quic.tls._peer_certificate.public_bytes(Encoding.DER)
            out = {"cert": hashlib.sha256(der).hexdigest()}
        c.close()
    return out


async def bench(host, port, path, n, conns):
    per = n // conns

    async def one():
        async with connect(host, port, configuration=config(), create_protocol=Client) as c:
            done = 0
            window = 32
            while done < per:
                k = min(window, per - done)
                sids = [c.start("GET", path) for _ in range(k)]
                await c.wait(sids)
                for s in sids:
                    r = c.result(s)
                    if r.get("status") != 200:
                        raise SystemExit("bad status %r" % r)
                    del c.streams[s]
                done += k
            return per

    t0 = time.monotonic()
    got = sum(await asyncio.gather(*(one() for _ in range(conns))))
    dt = time.monotonic() - t0
    return {"requests": got, "seconds": round(dt, 3), "rps": round(got / dt, 1)}


if __name__ == "__main__":
    host, port, mode, rest = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    if mode == "bench":
        r = asyncio.run(bench(host, port, rest[0], int(rest[1]), int(rest[2])))
    else:
        r = asyncio.run(main(host, port, mode, rest))
    print(json.dumps(r))
