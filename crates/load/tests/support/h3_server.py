"""An HTTP/3 server for the load engine's tests, on aioquic (PyPI): a real QUIC and HTTP/3
stack that is not the one under test. It answers every request with 200 and a small body,
and takes controls in the query string:

  ?s=N       a body of N bytes
  ?status=N  that status
  ?ms=N      answer after N milliseconds
  ?reset=1   reset the request's stream (H3_REQUEST_REJECTED) instead of answering
  ?close=1   close the whole connection (H3_EXCESSIVE_LOAD) instead of answering

Each answered request is one line "STATUS METHOD PATH" in the log file, as an access log.
Usage: h3_server.py CERT KEY LOG; prints "ready PORT" once it listens on 127.0.0.1."""

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


class Server(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = None
        self.heads = {}

    def quic_event_received(self, event):
        if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
            self.h3 = H3Connection(self._quic)
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
        delay = int(q.get("ms", 0)) / 1000
        asyncio.get_event_loop().call_later(delay, self.answer, stream_id, method, path, q)

    def answer(self, stream_id, method, path, q):
        status = int(q.get("status", 200))
        body = b"x" * int(q.get("s", 2))
        self.h3.send_headers(
            stream_id,
            [(b":status", str(status).encode()), (b"content-length", str(len(body)).encode())],
        )
        self.h3.send_data(stream_id, body, end_stream=True)
        self.transmit()
        LOG.write(f"{status} {method} {path}\n")
        LOG.flush()


async def main(cert, key, log):
    global LOG
    LOG = open(log, "a")
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN, max_datagram_frame_size=None)
    config.load_cert_chain(cert, key)
    server = await serve("127.0.0.1", 0, configuration=config, create_protocol=Server)
    port = server._transport.get_extra_info("sockname")[1]
    print(f"ready {port}", flush=True)
    await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
