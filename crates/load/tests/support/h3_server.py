"""An HTTP/3 server for the load engine's tests, on aioquic (PyPI): a real QUIC and HTTP/3
stack that is not the one under test. It answers every request with 200 and a small body,
and takes controls in the query string:

  ?s=N       a body of N bytes
  ?status=N  that status
  ?ms=N      answer after N milliseconds
  ?reset=1   reset the request's stream (H3_REQUEST_REJECTED) instead of answering
  ?close=1   close the whole connection (H3_EXCESSIVE_LOAD) instead of answering
  ?big=N     N headers of 2,000 bytes each
  ?endless=1 a body that never ends (a chunk every 10 ms)
  ?unis=N    open N unidirectional streams of a reserved type first
  ?encoder=1 open a QPACK encoder stream that inserts into the dynamic table first

Each answered request is one line "STATUS METHOD PATH" in the log file, as an access log;
each connection one line "HOST:PORT" (where it came from) in the log file's name + ".peers".
Sessions are resumed from tickets it keeps (each used once), with 0-RTT early data; with
"forget-half" as a fourth argument it forgets every second ticket asked for (that handshake
goes in full and refuses the client's early data).
Usage: h3_server.py CERT KEY LOG [forget-half]; prints "ready PORT" once it listens on
127.0.0.1."""

import asyncio
import sys
from urllib.parse import parse_qs, urlsplit

from aioquic.asyncio import serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ProtocolNegotiated

LOG = None
PEERS = None


class Server(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = None
        self.heads = {}

    def quic_event_received(self, event):
        if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
            self.h3 = H3Connection(self._quic)
            # Where the connection comes from, a line in LOG.peers.
            host, port = self._quic._network_paths[0].addr[:2]
            PEERS.write(f"{host}:{port}\n")
            PEERS.flush()
        if self.h3 is None:
            return
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived):
                self.heads[ev.stream_id] = dict(ev.headers)
                if ev.stream_ended:
                    self.request(ev.stream_id)
            elif isinstance(ev, DataReceived) and ev.stream_ended:
                self.request(ev.stream_id)

    def request(self, stream_id):
        head = self.heads.pop(stream_id, {})
        method = head.get(b":method", b"").decode()
        path = head.get(b":path", b"/").decode()
        q = {k: v[0] for k, v in parse_qs(urlsplit(path).query).items()}
        if q.get("reset"):
            self._quic.reset_stream(stream_id, 0x10B)
            self.transmit()
            return
        if q.get("close"):
            self._quic.close(error_code=0x107, reason_phrase="closed by request")
            self.transmit()
            return
        for _ in range(int(q.get("unis", 0))):
            sid = self._quic.get_next_available_stream_id(is_unidirectional=True)
            self._quic.send_stream_data(sid, b"\x21x", end_stream=False)
        if q.get("encoder"):
            sid = self._quic.get_next_available_stream_id(is_unidirectional=True)
            # Stream type 0x02, then "Insert With Literal Name" (01 H len=1) "a", value "b".
            self._quic.send_stream_data(sid, b"\x02\x41a\x01b", end_stream=False)
        self.transmit()
        delay = int(q.get("ms", 0)) / 1000
        asyncio.get_event_loop().call_later(delay, self.answer, stream_id, method, path, q)

    def answer(self, stream_id, method, path, q):
        status = int(q.get("status", 200))
        body = b"x" * int(q.get("s", 2))
        if q.get("endless"):
            self.h3.send_headers(stream_id, [(b":status", b"200")])
            self.trickle(stream_id)
            return
        headers = [(b":status", str(status).encode()), (b"content-length", str(len(body)).encode())]
        for i in range(int(q.get("big", 0))):
            headers.append((f"x-big-{i}".encode(), b"y" * 2000))
        self.h3.send_headers(stream_id, headers)
        self.h3.send_data(stream_id, body, end_stream=True)
        self.transmit()
        LOG.write(f"{status} {method} {path}\n")
        LOG.flush()


    def trickle(self, stream_id):
        try:
            self.h3.send_data(stream_id, b"z" * 1000, end_stream=False)
        except Exception:
            return  # the stream or connection is gone
        self.transmit()
        asyncio.get_event_loop().call_later(0.01, self.trickle, stream_id)


class Tickets:
    """Session tickets, each resumed once; with forget_half, every second one asked for is
    not found."""

    def __init__(self, forget_half):
        self.kept = {}
        self.asked = 0
        self.forget_half = forget_half

    def add(self, ticket):
        self.kept[ticket.ticket] = ticket

    def pop(self, label):
        self.asked += 1
        ticket = self.kept.pop(label, None)
        return None if self.forget_half and self.asked % 2 == 0 else ticket


async def main(cert, key, log, forget_half=False):
    global LOG, PEERS
    LOG = open(log, "a")
    PEERS = open(log + ".peers", "a")
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN, max_datagram_frame_size=None)
    config.load_cert_chain(cert, key)
    tickets = Tickets(forget_half)
    server = await serve("127.0.0.1", 0, configuration=config, create_protocol=Server,
                         session_ticket_fetcher=tickets.pop, session_ticket_handler=tickets.add)
    port = server._transport.get_extra_info("sockname")[1]
    print(f"ready {port}", flush=True)
    await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4], forget_half=sys.argv[4:5] == ["forget-half"]))
