"""An HTTP/3 client for the server's tests, on aioquic (PyPI): a real QUIC and HTTP/3 stack
that is not the one under test. Usage: h3_client.py PORT ACTION [ARG...]; prints one JSON
object: what came back.

  get PATH N       N requests for PATH at once (GET), each answer's status and body length
  post PATH BYTES  one POST with a body of BYTES bytes
  raw HEX          a request stream carrying these bytes (then its end), as sent
  uni HEX          a unidirectional stream carrying these bytes (its type first), as sent
  goaway           one GET, then a GOAWAY on the control stream (a client done with it)
  unis N END       N unidirectional streams of a reserved type, one after the other, each
                   ended (END=1) or left open (END=0), then one GET
  endless SECONDS  a POST of no declared length whose body keeps coming for SECONDS
  zerortt PATH     a connection that keeps the server's session ticket, then one that
                   resumes it and sends a GET for PATH in its first flight (0-RTT): its
                   answer, and whether the server took the early data
  flood N          N handshakes begun at once (each client's first datagrams, from one UDP
                   socket) and never finished: how many answers were Retry packets and how
                   many were not, within a second

Every answer also says whether and how the server closed the connection (its error code and
reason), within two seconds of the last request."""

import asyncio
import json
import ssl
import sys

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.answers = {}
        self.waiters = {}
        self.closed = None

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.closed = {"code": event.error_code, "reason": event.reason_phrase}
            for w in self.waiters.values():
                if not w.done():
                    w.set_result(None)
            return
        if isinstance(event, StreamReset):
            a = self.answers.setdefault(event.stream_id, {"status": 0, "body": 0})
            a["reset"] = event.error_code
            self.finish(event.stream_id)
        for ev in self.h3.handle_event(event):
            a = self.answers.setdefault(ev.stream_id, {"status": 0, "body": 0})
            if isinstance(ev, HeadersReceived):
                for k, v in ev.headers:
                    if k == b":status":
                        a["status"] = int(v)
            elif isinstance(ev, DataReceived):
                a["body"] += len(ev.data)
            if getattr(ev, "stream_ended", False):
                self.finish(ev.stream_id)

    def finish(self, sid):
        w = self.waiters.get(sid)
        if w and not w.done():
            w.set_result(None)

    def request(self, method, path, body=b""):
        sid = self._quic.get_next_available_stream_id()
        headers = [(b":method", method), (b":scheme", b"https"),
                   (b":authority", b"localhost"), (b":path", path.encode())]
        if body:
            headers.append((b"content-length", str(len(body)).encode()))
        self.h3.send_headers(sid, headers, end_stream=not body)
        if body:
            self.h3.send_data(sid, body, end_stream=True)
        return self.wait(sid)

    def wait(self, sid):
        self.waiters[sid] = asyncio.get_event_loop().create_future()
        self.transmit()
        return sid, self.waiters[sid]


def flood(port, n):
    import socket
    import time
    from aioquic.quic.connection import QuicConnection
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    counts = {"retries": 0, "others": 0}

    def take(data):
        # A long header's type: 0b11 is Retry (RFC 9000 section 17.2.5).
        retry = data[0] & 0x80 and (data[0] & 0x30) == 0x30
        counts["retries" if retry else "others"] += 1

    # Answers are read as the flood goes (a socket buffer capped by net.core.rmem_max would
    # drop some if they waited for the end).
    sock.setblocking(False)
    now = time.time()
    for _ in range(n):
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
        config.verify_mode = ssl.CERT_NONE
        q = QuicConnection(configuration=config)
        q.connect(("127.0.0.1", port), now=now)
        for data, _ in q.datagrams_to_send(now=now):
            sock.sendto(data, ("127.0.0.1", port))
        while True:
            try:
                take(sock.recv(65536))
            except BlockingIOError:
                break
    sock.settimeout(0.2)
    end = time.time() + 1.0
    while time.time() < end:
        try:
            take(sock.recv(65536))
        except socket.timeout:
            continue
    retries, others = counts["retries"], counts["others"]
    print(json.dumps({"retries": retries, "others": others}), flush=True)


async def zero_rtt(port, path):
    tickets = []
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    async with connect("127.0.0.1", port, configuration=config, create_protocol=Client,
                       session_ticket_handler=tickets.append) as c:
        _, w = c.request(b"GET", "/")
        await asyncio.wait_for(w, 5)
        for _ in range(50):
            if tickets:
                break
            await asyncio.sleep(0.02)
    if not tickets:
        print(json.dumps({"error": "no session ticket"}), flush=True)
        return
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, session_ticket=tickets[-1])
    config.verify_mode = ssl.CERT_NONE
    async with connect("127.0.0.1", port, configuration=config, create_protocol=Client,
                       wait_connected=False) as c:
        sid, w = c.request(b"GET", path)
        await asyncio.wait_for(w, 5)
        early = c._quic.tls.early_data_accepted
        print(json.dumps({"answers": [c.answers.get(sid)], "early_data_accepted": early,
                          "closed": c.closed}), flush=True)


async def main():
    port, action, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    if action == "flood":
        return flood(port, int(args[0]))
    if action == "zerortt":
        return await zero_rtt(port, args[0])
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    async with connect("127.0.0.1", port, configuration=config, create_protocol=Client) as c:
        waits = []
        if action == "get":
            waits = [c.request(b"GET", args[0]) for _ in range(int(args[1]))]
        elif action == "post":
            waits = [c.request(b"POST", args[0], b"x" * int(args[1]))]
        elif action == "raw":
            sid = c._quic.get_next_available_stream_id()
            c._quic.send_stream_data(sid, bytes.fromhex(args[0]), end_stream=True)
            waits = [c.wait(sid)]
        elif action == "goaway":
            _, w = c.request(b"GET", "/")
            await asyncio.wait_for(w, 5)
            # GOAWAY (type 0x07), one byte of payload: push ID 0.
            c._quic.send_stream_data(c.h3._local_control_stream_id, bytes([7, 1, 0]))
            c.transmit()
        elif action == "unis":
            for _ in range(int(args[0])):
                sid = c._quic.get_next_available_stream_id(is_unidirectional=True)
                # A reserved stream type (0x21 + 0x1f * N, RFC 9114 section 6.2.3).
                c._quic.send_stream_data(sid, b"\x21grease", end_stream=args[1] == "1")
                c.transmit()
                await asyncio.sleep(0.002)
            waits = [c.request(b"GET", "/")]
        elif action == "endless":
            sid = c._quic.get_next_available_stream_id()
            headers = [(b":method", b"POST"), (b":scheme", b"https"),
                       (b":authority", b"localhost"), (b":path", b"/")]
            c.h3.send_headers(sid, headers)
            waits = [c.wait(sid)]
            loop = asyncio.get_event_loop()
            until = loop.time() + float(args[0])
            sent = 0
            while loop.time() < until and not waits[0][1].done():
                # As fast as the server's flow control lets it go.
                if c._quic._streams[sid].sender.buffer_is_empty:
                    c.h3.send_data(sid, b"x" * 65536, end_stream=False)
                    sent += 65536
                c.transmit()
                await asyncio.sleep(0.001)
        elif action == "uni":
            sid = c._quic.get_next_available_stream_id(is_unidirectional=True)
            c._quic.send_stream_data(sid, bytes.fromhex(args[0]), end_stream=False)
            c.transmit()
        for _, w in waits:
            try:
                await asyncio.wait_for(w, 5)
            except asyncio.TimeoutError:
                pass
        for _ in range(20):
            if c.closed or waits:
                break
            await asyncio.sleep(0.1)
        answers = [c.answers.get(sid, {"status": 0, "body": 0}) for sid, _ in waits]
        print(json.dumps({"answers": answers, "closed": c.closed}), flush=True)


asyncio.run(main())
