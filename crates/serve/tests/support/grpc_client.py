"""grpcio's client (PyPI: gRPC's C core) calling a unary method at 127.0.0.1:PORT over h2c:
N calls with a small message, then M calls whose metadata asks the server for status 14
(`qpslab-grpc-status`). The messages go as bytes (no code generated): the server answers any
method. Prints JSON: calls that ended OK with an empty message, and the codes of the others.

Usage: grpc_client.py PORT METHOD N M
"""

import json
import sys

import grpc


def main():
    port, method, n, m = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    out = {"ok_empty": 0, "codes": {}}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        for i in range(n + m):
            meta = (("qpslab-grpc-status", "14"),) if i >= n else ()
            try:
                reply = call(b"\x0a\x05hello", metadata=meta, timeout=5)
                out["ok_empty"] += reply == b""
            except grpc.RpcError as e:
                name = e.code().name
                out["codes"][name] = out["codes"].get(name, 0) + 1
    print(json.dumps(out))


if __name__ == "__main__":
    main()
