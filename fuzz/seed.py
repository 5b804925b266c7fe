#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs into fuzz/corpus/TARGET/: requests and responses from
the tests, the bad inputs a server must survive, and the RFC examples (RFC 9112's chunked body,
RFC 7541 appendix C's header blocks, RFC 9113's frames). The fuzzer grows the corpus from them;
`cargo fuzz cmin` keeps the inputs that add coverage. Each file is named by its SHA-1, as
libFuzzer names what it finds. Usage: python3 fuzz/seed.py"""

import hashlib
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 1, 1, 4, 8, 0x20

# RFC 7541 appendix C.3 (no Huffman) and C.4 (Huffman): three requests on one connection.
C3 = [bytes.fromhex(h) for h in (
    "828684410f7777772e6578616d706c652e636f6d",
    "828684be58086e6f2d6361636865",
    "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565")]
C4 = [bytes.fromhex(h) for h in (
    "828684418cf1e3c2e5f23a6ba0ab90f4ff",
    "828684be5886a8eb10649cbf",
    "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf")]
STATUS_200, STATUS_404 = b"\x88", b"\x8d"

REQUESTS = [
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /1k?s=1024&c=201 HTTP/1.1\r\nHost: a\r\nUser-Agent: qpslab\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /?t=5 HTTP/1.1\r\nHost: a\r\n\r\nGET /?k=0 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nT: 1\r\n\r\n",
    b"POST /p HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
    b"GET /?chunked=1&s=100 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"\r\nGET http://h/x HTTP/1.2\r\nHost: h\r\nConnection: close\r\n\r\n",
    # The bad inputs a server must survive.
    b"GET / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n",
    b"GET / HTTP/1.1\rHost: a\r\n\r\n",
    b"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / http/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
    b"GET /" + b"a" * 300 + b" HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\n" + b"".join(b"X%d: v\r\n" % i for i in range(12)) + b"Host: a\r\n\r\n",
    b"BREW / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\nhello",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(32),
    b"".join(b"GET /%d HTTP/1.1\r\nHost: a\r\n\r\n" % i for i in range(16)),
]

RESPONSES = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\nuntil close",
    b"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
]

CHUNKED = [
    b"4\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\n",
    b"4;name=value;x\r\nWiki\r\n0\r\nExpires: never\r\nT: 2\r\n\r\n",
    b"0\r\n\r\nGET / HTTP/1.1\r\n",
    b"ffffffffffffffff\r\n", b"1\nx\n0\n\n", b"1 \r\nx\r\n", b"2\r\nabc\r\n",
]


def h2_client_frames():
    """Client frames after the preface, as the server reads them."""
    settings = frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 1 << 20) + struct.pack(">HI", 1, 0))
    yield settings + frame(HEADERS, END_STREAM | END_HEADERS, 1, C3[0])
    yield settings + b"".join(frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * i, b)
                              for i, b in enumerate(C4))
    post = bytes.fromhex("83868441") + bytes([1]) + b"a" + b"\x04\x02/p"
    yield settings + frame(HEADERS, END_HEADERS, 1, post) + frame(DATA, 0, 1, b"x" * 100) \
        + frame(DATA, END_STREAM | PADDED, 1, b"\x03abc\x00\x00\x00") + frame(WINDOW, 0, 0, struct.pack(">I", 1000))
    yield settings + frame(HEADERS, END_HEADERS, 1, C3[0][:5]) + frame(CONT, END_HEADERS, 1, C3[0][5:]) \
        + frame(DATA, END_STREAM, 1, b"")
    yield frame(SETTINGS, 0, 0) + frame(PING, 0, 0, b"12345678") + frame(SETTINGS, ACK, 0) \
        + frame(PRIORITY, 0, 3, struct.pack(">IB", 3, 16)) \
        + frame(HEADERS, END_STREAM | END_HEADERS | PRIO, 5, struct.pack(">IB", 5, 16) + C3[0]) \
        + frame(RST, 0, 1, struct.pack(">I", 8)) + frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0))
    yield frame(SETTINGS, 0, 0) + frame(HEADERS, END_STREAM | END_HEADERS, 1,
                                        bytes.fromhex("8286") + b"\x04\x07/?t=10&" + b"\x41\x01a")


def h2_server_frames():
    """Server frames, as the load generator reads them (its streams are 1, 3, 5, 7)."""
    settings = frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 100) + struct.pack(">HI", 4, 1 << 16))
    yield settings + frame(SETTINGS, ACK, 0) + frame(HEADERS, END_STREAM | END_HEADERS, 1, STATUS_200)
    yield settings + frame(HEADERS, END_HEADERS, 1, STATUS_200 + b"\x5c\x015") \
        + frame(DATA, END_STREAM, 1, b"hello") + frame(WINDOW, 0, 0, struct.pack(">I", 1 << 20)) \
        + frame(WINDOW, 0, 1, struct.pack(">I", 1 << 16))
    yield settings + frame(HEADERS, END_STREAM | END_HEADERS, 3, STATUS_404) \
        + frame(RST, 0, 1, struct.pack(">I", 7)) + frame(PING, 0, 0, b"abcdefgh") \
        + frame(GOAWAY, 0, 0, struct.pack(">II", 3, 0))
    yield frame(SETTINGS, 0, 0, struct.pack(">HI", 1, 0)) \
        + frame(HEADERS, END_HEADERS, 1, b"\x3f\xe1\x1f" + STATUS_200) + frame(CONT, END_HEADERS, 1, b"") \
        + frame(DATA, END_STREAM | PADDED, 1, b"\x02ab\x00\x00")
    yield frame(HEADERS, END_HEADERS, 1, b"\x08\x03\x31\x30\x30") + frame(HEADERS, END_STREAM | END_HEADERS, 1, STATUS_200)


def varint(v):
    """A QUIC variable-length integer (RFC 9000 section 16), shortest form."""
    if v < 64:
        return bytes([v])
    if v < 16384:
        return struct.pack(">H", v | 0x4000)
    if v < 1 << 30:
        return struct.pack(">I", v | 0x80000000)
    return struct.pack(">Q", v | 0xC000000000000000)


def h3(kind, payload=b""):
    return varint(kind) + varint(len(payload)) + payload


# RFC 9204 appendix B.1's section (a static name reference), a static :status 200, a literal
# name with a Huffman value, and sections that refer to a dynamic table (refused).
QPACK = [b"\x00\x00\x51\x0b/index.html", b"\x00\x00\xd9", b"\x00\x00\xd9\x5f\x1d\x8a\xf1\xe3\xc2\xe5\xf2\x3a\x6b\xa0\xab\x90",
         b"\x00\x00\x23abc\x03xyz", b"\x00\x00\xc0\xc1\xd1\xd7", b"\x03\x81\x10", b"\x00\x00\x80"]


def h3_streams():
    """A server's control stream (after its type byte) and request streams' frames."""
    settings = h3(0x04, varint(0x01) + varint(0) + varint(0x06) + varint(16384) + varint(0x21) + varint(1))
    yield settings + h3(0x07, varint(4)) + h3(0x21, b"grease")
    yield h3(0x01, QPACK[1]) + h3(0x00, b"hello") + h3(0x00, b"") + h3(0x01, QPACK[3])
    yield h3(0x01, QPACK[0]) + h3(0x5e, b"x" * 40) + h3(0x00, b"y" * 300)
    yield h3(0x04, varint(0x02) + varint(1)) + h3(0x06, b"12345678") + h3(0x01, b"\x00")


def step(op, payload=b""):
    """A step of a QUIC script (serve_h3, load_h3_client): operation, length, payload."""
    return bytes([op, len(payload)]) + payload


def qpack_request(method, path, extra=b""):
    """A request's QPACK section: static :method (GET 17, POST 20), :scheme https (23),
    :path and :authority as literals with static names."""
    m = {"GET": 0xd1, "POST": 0xd4}[method]
    return b"\x00\x00" + bytes([m, 0xd7, 0x51, len(path)]) + path + b"\x50\x09localhost" + extra


def serve_h3_scripts():
    """What an HTTP/3 client does: open a request stream and write (0), write (1), finish (2),
    open a unidirectional stream and write (3), write on it (4), reset (5), a datagram (6),
    time passes (7)."""
    control = step(3, varint(0) + h3(0x04, varint(0x06) + varint(16384)))
    get = lambda path: step(0, h3(0x01, qpack_request("GET", path))) + step(2)
    yield control + get(b"/") + get(b"/?s=5000&c=201") + get(b"/nope")
    # A body in two DATA frames, declared by content-length (static index 4, a literal value).
    post = h3(0x01, qpack_request("POST", b"/p", b"\x54\x015"))
    yield control + step(0, post) + step(1, h3(0x00, b"he")) + step(1, h3(0x00, b"llo")) + step(2)
    # A delay; the client resets a request; GOAWAY from the client; the server's GOAWAY (k=0).
    yield get(b"/?t=200") + step(7, b"x" * 30) + step(0, h3(0x01, qpack_request("GET", b"/"))) + step(5, b"\x0c")
    yield control + get(b"/") + step(4, h3(0x07, varint(4))) + get(b"/")
    yield get(b"/?k=0") + get(b"/")
    # What breaks HTTP/3: DATA before HEADERS, a stream ending inside a frame, a push stream,
    # a QPACK encoder inserting, a second control stream, a frame a control stream may not carry.
    yield step(0, b"\x00\x03abc") + step(2)
    yield step(0, b"\x01\x0a\x00\x00\xd1") + step(2)
    yield step(3, b"\x01")
    yield step(3, b"\x02\x41\x61")
    yield control + control
    yield step(3, varint(0) + h3(0x00, b"x"))
    # Many streams, unknown stream types, a datagram of noise, a request never finished.
    yield b"".join(get(b"/?s=%d" % i) for i in range(10)) + step(3, b"\x21abc") + step(3, b"\x3f")
    yield step(6, b"\xc0\x00\x00\x00\x01" + b"\x00" * 40) + get(b"/") + step(0, h3(0x01, qpack_request("GET", b"/")))


def load_h3_scripts():
    """What an HTTP/3 server does to the generator's requests: write on the oldest request
    stream (0), finish it (1), reset it (2), open a unidirectional stream and write (3), write
    on it (4), stop reading the oldest request (5), a datagram (6), time passes (7)."""
    control = step(3, varint(0) + h3(0x04, varint(0x06) + varint(16384)))
    ok = step(0, h3(0x01, QPACK[1]) + h3(0x00, b"hello")) + step(1)
    yield control + ok + ok + ok + ok + ok
    yield control + step(0, h3(0x01, b"\x00\x00\x5f\x09\x03100")) + ok + step(2, b"\x0c") + step(5, b"\x00") + ok
    yield control + step(0, h3(0x01, QPACK[1])) + step(0, h3(0x00, b"x" * 200)) + step(0, h3(0x01, QPACK[1])) + step(1)
    yield control + step(4, h3(0x07, varint(4))) + ok + ok
    yield step(0, h3(0x00, b"ab"))
    yield step(3, b"\x01") + ok
    yield step(3, b"\x02\x41\x61") + ok
    yield control + step(0, h3(0x01, QPACK[6])) + step(1)
    yield control + step(0, h3(0x01, b"\x00\x00")) + step(1)
    yield control + step(7, b"x" * 255) + step(6, b"\x40" + b"\x00" * 30) + ok


def client_hellos():
    """ClientHellos as Python's ssl module (OpenSSL) writes them: TLS 1.3 and 1.2, with ALPN."""
    import ssl
    for version, alpn in ((ssl.TLSVersion.TLSv1_3, ["h2", "http/1.1"]), (ssl.TLSVersion.TLSv1_2, ["http/1.1"])):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.minimum_version = ctx.maximum_version = version
        ctx.set_alpn_protocols(alpn)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        conn = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
        try:
            conn.do_handshake()
        except ssl.SSLWantReadError:
            pass
        yield outgoing.read()


def quic_frames():
    """QUIC frame payloads (RFC 9000 section 19): what a server sends a client."""
    v = varint
    ack = b"\x02" + v(100) + v(7) + v(2) + v(10) + v(3) + v(5) + v(0) + v(0)
    ack_ecn = b"\x03" + v(5) + v(0) + v(0) + v(5) + v(1) + v(2) + v(3)
    crypto = b"\x06" + v(0) + v(4) + b"\x02\x00\x00\x00"
    stream = b"\x0f" + v(0) + v(1000) + v(5) + b"hello"
    stream_to_end = b"\x08" + v(4) + b"rest of the packet"
    ncid = b"\x18" + v(1) + v(0) + b"\x08" + bytes(range(8)) + bytes(16)
    close = b"\x1c" + v(0x0a) + v(0x08) + v(3) + b"bad"
    app_close = b"\x1d" + v(0x100) + v(0)
    maxes = (b"\x10" + v(1 << 20) + b"\x11" + v(0) + v(65536) + b"\x12" + v(100)
             + b"\x13" + v(3) + b"\x1e" + b"\x01")
    resets = b"\x04" + v(0) + v(0x10c) + v(3) + b"\x05" + v(4) + v(0x10c)
    for p in (ack, ack_ecn, crypto, stream, stream_to_end, ncid, close, app_close, maxes,
              resets, ack + crypto + b"\x00" * 20, b"\x1a" + bytes(8) + b"\x1b" + bytes(8),
              b"\x07" + v(4) + b"tokn" + b"\x19" + v(2) + b"\x14" + v(9) + b"\x15" + v(0) + v(9)):
        yield p


def quic_packets():
    """The quic_packets target's inputs: frames (first byte below 64), datagrams of
    headers (64-127), frames to seal and open (128 and up: packet number, distance to the
    last acknowledged, then the frames)."""
    for f in quic_frames():
        yield b"\x00" + f
        yield b"\x81" + bytes([0, 0, 1, 44, 0, 10]) + f
        yield b"\x80" + bytes([0, 1, 0, 0, 0, 200]) + f
    dcid, scid = bytes(range(8)), bytes(range(8, 12))
    initial = (b"\xc3\x00\x00\x00\x01" + bytes([8]) + dcid + bytes([4]) + scid + varint(2)
               + b"tk" + varint(40) + bytes(40))
    handshake = b"\xe1\x00\x00\x00\x01" + bytes([4]) + scid + bytes([8]) + dcid + varint(30) + bytes(30)
    short = b"\x41" + dcid + bytes(40)
    vn = b"\x80\x00\x00\x00\x00" + bytes([8]) + dcid + bytes([4]) + scid + b"\x00\x00\x00\x01"
    retry = b"\xf0\x00\x00\x00\x01" + bytes([8]) + dcid + bytes([4]) + scid + b"token" + bytes(16)
    for d in (initial, initial + handshake + short, vn, retry, short, handshake + b"\x00" * 3):
        yield b"\x40" + d


def grpc_streams():
    """gRPC response bodies: messages framed as servers frame them (one, several, an empty
    one), and the malformed ones a generator must name: a compressed flag, an unknown flag, a
    length past the limit, a body cut inside a prefix and inside a message."""
    def msg(body, flag=0):
        return bytes([flag]) + struct.pack(">I", len(body)) + body
    hello = b"\x0a\x05hello"  # a protobuf message: field 1, the string "hello"
    return [
        msg(hello),
        msg(hello) + msg(b"") + msg(b"\x08\x96\x01"),
        msg(b"x" * 300),
        msg(hello, flag=1),
        msg(hello, flag=7),
        b"\x00\xff\xff\xff\xff" + hello,
        msg(hello)[:3],
        msg(hello)[:-2],
    ]


def grpc_server_frames():
    """A gRPC server's frames, as the generator's calls read them (streams 1, 3, 5, 7):
    headers, messages, trailers; a Trailers-Only answer; a status in headers and trailers; a
    compressed message; a length past the limit; a cut message; a proxy's 503."""
    def literal(name, value):
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
    ct = b"\x0f\x10" + bytes([16]) + b"application/grpc"
    ok = literal(b"grpc-status", b"0")
    def msg(body, flag=0):
        return bytes([flag]) + struct.pack(">I", len(body)) + body
    settings = frame(SETTINGS, 0, 0, struct.pack(">HI", 3, 100))
    head = frame(HEADERS, END_HEADERS, 1, STATUS_200 + ct)
    yield settings + head + frame(DATA, 0, 1, msg(b"\x0a\x01a") * 3) \
        + frame(HEADERS, END_STREAM | END_HEADERS, 1, ok)
    yield settings + frame(HEADERS, END_STREAM | END_HEADERS, 1, STATUS_200 + ct
                           + literal(b"grpc-status", b"14") + literal(b"grpc-message", b"down%20now"))
    yield settings + frame(HEADERS, END_HEADERS, 1, STATUS_200 + ct + ok) \
        + frame(DATA, 0, 1, msg(b"x")) + frame(HEADERS, END_STREAM | END_HEADERS, 1, ok)
    yield settings + head + frame(DATA, 0, 1, msg(b"xy", flag=1)) \
        + frame(HEADERS, END_STREAM | END_HEADERS, 1, ok)
    yield settings + head + frame(DATA, 0, 1, b"\x00\xff\xff\xff\xff" + b"x" * 10) \
        + frame(HEADERS, END_STREAM | END_HEADERS, 1, ok)
    yield settings + head + frame(DATA, END_STREAM, 1, msg(b"hello")[:7])
    yield settings + frame(HEADERS, END_STREAM | END_HEADERS, 1, b"\x08\x03503")


def main():
    for r in REQUESTS:
        put("request_head", r)
        put("serve_session", b"\x00" + r)
        put("serve_session", b"\x07" + r)
        put("serve_session", b"\xff" + r)
    for r in RESPONSES:
        put("response", bytes([len(r) // 2]) + r)
    for c in CHUNKED:
        put("chunked", bytes([len(c) // 2]) + c)
    for blocks in (C3, C4, [STATUS_200, STATUS_404, b"\x3f\xe1\x1f\x88", b"\x20\x88"]):
        put("hpack", b"".join(bytes([len(b)]) + b for b in blocks))
    for f in h2_client_frames():
        put("serve_h2_session", b"\xff" + f)
        put("serve_h2_session", b"\x04" + f)
        put("h2_frames", f)
    put("qpack", b"".join(bytes([len(q)]) + q for q in QPACK))
    for q in QPACK:
        put("qpack", bytes([len(q)]) + q)
    for f in h3_streams():
        put("h3_frames", b"\xff" + f)
        put("h3_frames", b"\x03" + f)
    for hello in client_hellos():
        put("serve_tls", b"\xff" + hello)
        put("serve_tls", b"\x10" + hello)
        put("serve_tls", b"\xff" + hello + b"\x15\x03\x03\x00\x02\x01\x00")
    for script in serve_h3_scripts():
        put("serve_h3", script)
    for script in load_h3_scripts():
        put("load_h3_client", script)
    for p in quic_packets():
        put("quic_packets", p)
    for body in grpc_streams():
        put("grpc_messages", b"\xff" + body)
        put("grpc_messages", b"\x03" + body)
    for f in grpc_server_frames():
        put("load_grpc_client", b"\xff" + f)
        put("load_grpc_client", b"\x06" + f)
    for f in h2_server_frames():
        put("load_h2_client", b"\xff" + f)
        put("load_h2_client", b"\x05" + f)
        put("h2_frames", f)


if __name__ == "__main__":
    main()
