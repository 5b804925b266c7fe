"""A gRPC load from grpcio's client (PyPI: gRPC's C core), for scripts/bench-grpc-load: CONNS
channels (each its own connection), STREAMS calls in flight on each, unary calls of METHOD
with a 7-byte message for SECS seconds. Prints JSON: calls that ended OK, the codes of the
others. Messages go as bytes (no generated code). Traffic goes to 127.0.0.1 only.

Usage: grpcio-client.py PORT METHOD CONNS STREAMS SECS
"""

import json
import sys
import threading
import time

import grpc


def main():
    port, method = sys.argv[1], sys.argv[2]
    conns, streams, secs = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    out = {"ok": 0, "codes": {}}
    lock = threading.Lock()
    done = threading.Event()
    end = time.monotonic() + secs
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}",
                                      options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(conns)]
    calls = [c.unary_unary(method, request_serializer=None, response_deserializer=None)
             for c in channels]
    live = [0]

    def start(call):
        with lock:
            live[0] += 1
        f = call.future(b"\x0a\x05hello", timeout=10)
        f.add_done_callback(lambda f: finished(call, f))

    def finished(call, f):
        code = f.code()
        with lock:
            live[0] -= 1
            if code == grpc.StatusCode.OK:
                out["ok"] += 1
            else:
                out["codes"][code.name] = out["codes"].get(code.name, 0) + 1
        if time.monotonic() < end:
            start(call)
        elif live[0] == 0:
            done.set()

    for call in calls:
        for _ in range(streams):
            start(call)
    done.wait(secs + 15)
    print(json.dumps(out))
    for c in channels:
        c.close()


if __name__ == "__main__":
    main()
