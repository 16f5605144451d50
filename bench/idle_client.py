#!/usr/bin/env python3
"""Idle-connection client for bench/idle.sh.

Opens N connections to 127.0.0.1:PORT, makes one GET of PATH on each (HTTP/1.1 keep-alive,
or HTTP/2 with prior knowledge / ALPN h2), checks the answer is 200 with exactly the bytes
of EXPECT, then keeps every connection open and idle. Prints "ready N" once all are idle,
and holds them until it is terminated (SIGTERM) or stdin reaches its end.

    idle_client.py --port P --mode h1|h2c|tls-h1|tls-h2 --conns N --expect FILE [--path /index.html]

Standard library only: asyncio, ssl, and a few bytes of HTTP/2 framing and HPACK.
"""

import argparse
import asyncio
import resource
import signal
import ssl
import struct
import sys

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_request(path, https):
    """Preface, empty SETTINGS and one HEADERS frame (stream 1, END_STREAM|END_HEADERS)."""
    block = bytes([0x82, 0x87 if https else 0x86])  # :method GET, :scheme
    p = path.encode()
    block += bytes([0x04, len(p)]) + p  # :path, literal without indexing, name index 4
    block += bytes([0x01, 9]) + b"localhost"  # :authority
    headers = struct.pack(">I", len(block))[1:] + bytes([0x1, 0x5]) + struct.pack(">I", 1) + block
    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    return PREFACE + settings + headers


async def h2_exchange(reader, writer, path, https):
    writer.write(h2_request(path, https))
    body = b""
    status_ok = False
    while True:
        head = await reader.readexactly(9)
        length = int.from_bytes(head[:3], "big")
        ftype, flags = head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        payload = await reader.readexactly(length)
        if ftype == 0x4 and not flags & 0x1:  # SETTINGS: acknowledge
            writer.write(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
        elif ftype == 0x7:  # GOAWAY
            raise RuntimeError(f"GOAWAY {payload[4:8].hex()}")
        elif ftype == 0x3 and stream == 1:
            raise RuntimeError("RST_STREAM")
        elif ftype == 0x1 and stream == 1:
            pad = payload[0] if flags & 0x8 else 0
            block = payload[1 if flags & 0x8 else 0:len(payload) - pad]
            if flags & 0x20:
                block = block[5:]
            # :status 200 is static index 8: every server sends it indexed (0x88).
            status_ok = block[:1] == b"\x88"
            if flags & 0x1:
                break
        elif ftype == 0x0 and stream == 1:
            pad = payload[0] if flags & 0x8 else 0
            body += payload[1 if flags & 0x8 else 0:len(payload) - pad]
            if flags & 0x1:
                break
    await writer.drain()
    return status_ok, body


async def h1_exchange(reader, writer, path):
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status_ok = lines[0].split(" ")[1] == "200"
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length is None:
        raise RuntimeError(f"no Content-Length: {head!r}")
    return status_ok, await reader.readexactly(length)


async def connect(args, ctx):
    return await asyncio.open_connection(
        "127.0.0.1", args.port, ssl=ctx, server_hostname="localhost" if ctx else None, limit=16384
    )


async def open_one(args, ctx, expect, held, conn=None, go=None):
    reader, writer = conn if conn is not None else await connect(args, ctx)
    if go is not None:
        await go.wait()
    if args.mode in ("h2c", "tls-h2"):
        if ctx is not None:
            alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
            if alpn != "h2":
                raise RuntimeError(f"ALPN chose {alpn!r}")
        ok, body = await h2_exchange(reader, writer, args.path, ctx is not None)
    else:
        ok, body = await h1_exchange(reader, writer, args.path)
    if not ok or body != expect:
        raise RuntimeError(f"bad answer: status ok={ok}, {len(body)} bytes")
    held.append((reader, writer))


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["h1", "h2c", "tls-h1", "tls-h2"], required=True)
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--parallel", type=int, default=64)
    ap.add_argument("--path", default="/index.html")
    ap.add_argument("--expect", required=True)
    ap.add_argument("--close", action="store_true", help="close them all at once after ready (warm-up)")
    ap.add_argument(
        "--burst",
        action="store_true",
        help="open every connection first, then send all the requests at once",
    )
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open(args.expect, "rb") as f:
        expect = f.read()
    ctx = None
    if args.mode.startswith("tls"):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"] if args.mode == "tls-h2" else ["http/1.1"])
    held = []
    sem = asyncio.Semaphore(args.parallel)
    errors = []

    async def guarded():
        async with sem:
            try:
                await asyncio.wait_for(open_one(args, ctx, expect, held), 30)
            except Exception as e:  # noqa: BLE001 - reported and counted
                errors.append(repr(e))

    if args.burst:
        # Every connection open before any request is sent: the server then has all the
        # requests in flight at once (the peak of its per-request memory).
        conns = []

        async def connect_guarded():
            async with sem:
                try:
                    conns.append(await asyncio.wait_for(connect(args, ctx), 30))
                except Exception as e:  # noqa: BLE001 - reported and counted
                    errors.append(repr(e))

        await asyncio.gather(*(connect_guarded() for _ in range(args.conns)))
        print(f"connected {len(conns)}", flush=True)
        go = asyncio.Event()

        async def burst_one(conn):
            try:
                await asyncio.wait_for(open_one(args, ctx, expect, held, conn, go), 60)
            except Exception as e:  # noqa: BLE001 - reported and counted
                errors.append(repr(e))

        tasks = [asyncio.ensure_future(burst_one(c)) for c in conns]
        await asyncio.sleep(0)
        go.set()
        await asyncio.gather(*tasks)
    else:
        await asyncio.gather(*(guarded() for _ in range(args.conns)))
    if errors:
        print(f"errors {len(errors)}: {errors[0]}", file=sys.stderr, flush=True)
    print(f"ready {len(held)}", flush=True)
    if args.close:
        for _, w in held:
            w.close()
        return
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    for _, w in held:
        w.close()


if __name__ == "__main__":
    asyncio.run(main())
