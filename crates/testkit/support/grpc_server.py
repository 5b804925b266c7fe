"""grpcio's server (PyPI: gRPC's C core) on a free loopback port, h2c, with a generic handler,
no generated code (messages are bytes):

  /test.Echo/Echo      answers the request message
  /test.Echo/Exhaust   ends with RESOURCE_EXHAUSTED (8)
  /test.Echo/Big       answers a message of 5000 bytes
  /test.Echo/Sink      answers an empty message
  /test.Echo/Distinct  answers the request message, counting the distinct ones it saw
  /test.Echo/Updates   server streaming: the request message three times
  /test.Echo/Upload    client streaming: the last request message, once all came
  /test.Echo/Chat      bidirectional: each request message echoed as it comes
  any other method     UNIMPLEMENTED (grpcio's own answer)

The streaming methods also count the request messages they read (as "<name>-messages").

Prints "ready PORT"; then each line read on stdin ("count") is answered with the calls it
took per method, as JSON. Ends when stdin closes.

Usage: grpc_server.py [--limit N] [--max-streams N] [--reflect FILE] [--bind ADDR]
                      [--window BYTES] [--compress]
  --limit N: more calls at once are refused with RESOURCE_EXHAUSTED (grpcio's
    maximum_concurrent_rpcs; 0: no limit)
  --max-streams N: the streams a connection may have open at once (its HTTP/2
    SETTINGS_MAX_CONCURRENT_STREAMS, grpc.max_concurrent_streams)
  --reflect FILE: the schema of test.Echo as a descriptor set file, served by gRPC server
    reflection (grpcio-reflection, v1alpha and v1)
  --bind ADDR: the address to listen on (default 127.0.0.1)
  --compress: answers gzip-compressed to a client that offers gzip (grpc-accept-encoding)
  --window BYTES: the HTTP/2 flow-control window it grants each call, kept (gRPC core's
    grpc.http2.lookahead_bytes, its window probing off); by default it grows with the path
"""

import argparse
import json
import sys
import threading
from concurrent import futures

import grpc

counts = {}
lock = threading.Lock()


def counted(name, behaviour):
    def handler(request, context):
        with lock:
            counts[name] = counts.get(name, 0) + 1
        return behaviour(request, context)

    return grpc.unary_unary_rpc_method_handler(handler)


seen = set()


def distinct(request):
    """Remembers each request message; the count says how many differed ("Distinct-seen")."""
    with lock:
        seen.add(request)
        counts["Distinct-seen"] = len(seen)
    return request


def exhaust(request, context):
    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "over quota")


def streamed(name, kind, behaviour):
    def handler(request_or_iterator, context):
        with lock:
            counts[name] = counts.get(name, 0) + 1
        return behaviour(request_or_iterator, context)

    return kind(handler)


def read(name, message):
    with lock:
        counts[name + "-messages"] = counts.get(name + "-messages", 0) + 1
    return message


def updates(request, context):
    read("Updates", request)
    for _ in range(3):
        yield request


def upload(requests, context):
    last = b""
    for m in requests:
        last = read("Upload", m)
    return last


def chat(requests, context):
    for m in requests:
        yield read("Chat", m)


METHODS = {
    "/test.Echo/Updates": streamed("Updates", grpc.unary_stream_rpc_method_handler, updates),
    "/test.Echo/Upload": streamed("Upload", grpc.stream_unary_rpc_method_handler, upload),
    "/test.Echo/Chat": streamed("Chat", grpc.stream_stream_rpc_method_handler, chat),
    "/test.Echo/Echo": counted("Echo", lambda request, context: request),
    "/test.Echo/Exhaust": counted("Exhaust", exhaust),
    "/test.Echo/Big": counted("Big", lambda request, context: b"\x07" * 5000),
    "/test.Echo/Sink": counted("Sink", lambda request, context: b""),
    "/test.Echo/Distinct": counted("Distinct", lambda request, context: distinct(request)),
}


class Generic(grpc.GenericRpcHandler):
    def service(self, handler_call_details):
        return METHODS.get(handler_call_details.method)


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--limit", type=int, default=0)
    args.add_argument("--max-streams", type=int)
    args.add_argument("--reflect")
    args.add_argument("--bind", default="127.0.0.1")
    args.add_argument("--window", type=int)
    args.add_argument("--compress", action="store_true")
    a = args.parse_args()
    options = []
    if a.window:
        options = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", a.window)]
    if a.max_streams:
        options.append(("grpc.max_concurrent_streams", a.max_streams))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                         maximum_concurrent_rpcs=a.limit or None, options=options,
                         compression=grpc.Compression.Gzip if a.compress else None)
    server.add_generic_rpc_handlers((Generic(),))
    if a.reflect:
        from google.protobuf import descriptor_pb2, descriptor_pool
        from grpc_reflection.v1alpha import reflection
        files = descriptor_pb2.FileDescriptorSet()
        with open(a.reflect, "rb") as f:
            files.ParseFromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for fd in files.file:
            pool.Add(fd)
        reflection.enable_server_reflection(("test.Echo", reflection.SERVICE_NAME), server,
                                            pool=pool)
    port = server.add_insecure_port(f"{a.bind}:0")
    server.start()
    print(f"ready {port}", flush=True)
    for _ in sys.stdin:
        with lock:
            print(json.dumps(counts), flush=True)
    server.stop(0)


if __name__ == "__main__":
    main()
