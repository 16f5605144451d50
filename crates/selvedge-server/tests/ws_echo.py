"""A WebSocket echo server, and a client that checks echoes (the `websockets` library).

    ws_echo.py serve              prints its port, echoes every message
    ws_echo.py serve-tls CERT KEY the same over TLS (wss)
    ws_echo.py client URL         text, 1 MiB binary, 100 messages; prints "ok"
    ws_echo.py idle URL SECONDS   connects, stays silent, then says "closed" or "open"
"""
import asyncio
import os
import sys

import websockets


async def echo(ws):
    async for m in ws:
        await ws.send(m)


async def serve(ssl=None):
    async with websockets.serve(echo, "127.0.0.1", 0, max_size=None, ssl=ssl) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


async def client(url):
    async with websockets.connect(url, max_size=None, compression=None) as ws:
        await ws.send("hello")
        assert await ws.recv() == "hello"
        blob = os.urandom(1 << 20)
        await ws.send(blob)
        assert await ws.recv() == blob
        for i in range(100):
            await ws.send(f"m{i}")
        for i in range(100):
            assert await ws.recv() == f"m{i}"
        print("ok", flush=True)


async def idle(url, secs):
    async with websockets.connect(url, ping_interval=None) as ws:
        await asyncio.sleep(secs)
        try:
            await asyncio.wait_for(ws.recv(), 5)
            print("open", flush=True)
        except websockets.ConnectionClosed:
            print("closed", flush=True)
        except asyncio.TimeoutError:
            print("open", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        asyncio.run(serve())
    elif sys.argv[1] == "serve-tls":
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
        asyncio.run(serve(ctx))
    elif sys.argv[1] == "client":
        asyncio.run(client(sys.argv[2]))
    else:
        asyncio.run(idle(sys.argv[2], float(sys.argv[3])))
