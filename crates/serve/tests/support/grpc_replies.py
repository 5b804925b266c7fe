"""grpcio's client (PyPI: gRPC's C core) asking qpslab serve for each kind of gRPC answer at
127.0.0.1:PORT (messages as bytes, no generated code), through metadata:

  echo      a unary call with qpslab-grpc-reply: echo gets its own message back
  size      qpslab-grpc-reply: 1000 gets a 1,000-byte message
  stream    a server-streaming call with qpslab-grpc-messages: 5 and reply 3 gets five
            3-byte messages
  bidi      a bidirectional call of four messages with reply echo gets the four back

Prints JSON: what each got (lengths and equality), and any error.

Usage: grpc_replies.py PORT
"""

import json
import sys

import grpc


def main():
    port = sys.argv[1]
    out = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        unary = channel.unary_unary("/echo.Echo/Say", request_serializer=None,
                                    response_deserializer=None)
        message = b"\x0a\x05hello\x10\x2a"
        reply = unary(message, metadata=(("qpslab-grpc-reply", "echo"),), timeout=5)
        out["echo"] = reply == message
        reply = unary(message, metadata=(("qpslab-grpc-reply", "1000"),), timeout=5)
        out["size"] = [len(reply), reply[:3].hex()]
        streaming = channel.unary_stream("/echo.Echo/Updates", request_serializer=None,
                                         response_deserializer=None)
        got = list(streaming(message, timeout=5, metadata=(
            ("qpslab-grpc-messages", "5"), ("qpslab-grpc-reply", "3"))))
        out["stream"] = [len(m) for m in got]
        bidi = channel.stream_stream("/echo.Echo/Chat", request_serializer=None,
                                     response_deserializer=None)
        sent = [bytes([0x0a, 1, 65 + i]) for i in range(4)]
        got = list(bidi(iter(sent), timeout=5, metadata=(("qpslab-grpc-reply", "echo"),)))
        out["bidi"] = got == sent
    print(json.dumps(out))


if __name__ == "__main__":
    main()
