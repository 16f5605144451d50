"""A grpcio server and client for tests/proxy_h2.rs (generic handlers over raw bytes, so
no generated code is needed).

  grpc_peer.py serve [--cert C --key K]      prints its port, serves until killed
  grpc_peer.py client HOST:PORT [--ca CA] [--unavailable]
"""

import argparse
import sys
import time
from concurrent import futures

import grpc

SVC = "test.Echo"


def unary(req, ctx):
    return b"echo:" + req


def server_streaming(req, ctx):
    for i in range(5):
        yield b"%s-%d" % (req, i)
        time.sleep(0.01)


def client_streaming(it, ctx):
    return b"|".join(it)


def bidi(it, ctx):
    for m in it:
        yield m.upper()


def error(req, ctx):
    ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "not for you")


def slow(req, ctx):
    time.sleep(2)
    return b"late"


def serve(a):
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStreaming": grpc.unary_stream_rpc_method_handler(server_streaming),
        "ClientStreaming": grpc.stream_unary_rpc_method_handler(client_streaming),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Error": grpc.unary_unary_rpc_method_handler(error),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
    }
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SVC, handlers),))
    if a.cert:
        creds = grpc.ssl_server_credentials([(open(a.key, "rb").read(), open(a.cert, "rb").read())])
        port = srv.add_secure_port("127.0.0.1:0", creds)
    else:
        port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    print(port, flush=True)
    srv.wait_for_termination()


def client(a):
    if a.ca:
        ch = grpc.secure_channel(a.target, grpc.ssl_channel_credentials(open(a.ca, "rb").read()))
    else:
        ch = grpc.insecure_channel(a.target)
    m = lambda kind, name: getattr(ch, kind)("/%s/%s" % (SVC, name))
    if a.unavailable:
        try:
            m("unary_unary", "Unary")(b"x", timeout=5)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e
            print("unavailable ok", e.details())
            return
        raise SystemExit("no error from a dead upstream")
    assert m("unary_unary", "Unary")(b"hi", timeout=5) == b"echo:hi"
    print("unary ok")
    got = list(m("unary_stream", "ServerStreaming")(b"s", timeout=5))
    assert got == [b"s-%d" % i for i in range(5)], got
    print("server_streaming ok")
    got = m("stream_unary", "ClientStreaming")(iter([b"a", b"b", b"c"]), timeout=5)
    assert got == b"a|b|c", got
    print("client_streaming ok")
    # Bidirectional, in lockstep: each answer arrives before the next message is sent,
    # which only works if neither direction is buffered.
    import queue

    q = queue.Queue()

    def msgs():
        for w in [b"one", b"two", b"three"]:
            q.put(w)
            yield w
            answered.get(timeout=5)

    answered = queue.Queue()
    out = []
    for r in m("stream_stream", "Bidi")(msgs(), timeout=10):
        out.append(r)
        answered.put(True)
    assert out == [b"ONE", b"TWO", b"THREE"], out
    print("bidi ok")
    try:
        m("unary_unary", "Error")(b"x", timeout=5)
        raise SystemExit("no error status")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.PERMISSION_DENIED and e.details() == "not for you", e
    print("error ok")
    t = time.time()
    try:
        m("unary_unary", "Slow")(b"x", timeout=0.5)
        raise SystemExit("no deadline")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e
    assert time.time() - t < 1.5
    print("deadline ok")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("target", nargs="?")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--ca")
    p.add_argument("--unavailable", action="store_true")
    a = p.parse_args()
    try:
        serve(a) if a.mode == "serve" else client(a)
    except AssertionError as e:
        print("FAILED", e, file=sys.stderr)
        sys.exit(1)
