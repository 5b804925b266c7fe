//! `--reflect`: the schema asked of the server by gRPC server reflection
//! (`grpc.reflection.v1.ServerReflection`, else `v1alpha`, the same messages), before the
//! run: one bidirectional call on a connection of its own (h2c, or h2 over TLS with the run's
//! TLS settings), asking for the file that defines the service; the server answers with it
//! and the files it imports. Blocking, bounded in time and in what it keeps.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use prost::Message as _;
use prost_reflect::{prost_types, DescriptorPool};
use qpslab_http::grpc;
use qpslab_http::h2::frame::{self, flag, kind, setting, Header, HEADER_LEN};
use qpslab_http::h2::hpack::Decoder;
use qpslab_http::{HeaderArg, RequestSpec};

/// The whole exchange's time limit.
const LIMIT: Duration = Duration::from_secs(10);
/// The most an answer may carry (its descriptor files).
const MAX_ANSWER: usize = 16 << 20;

/// The reflection service's request (the same in v1 and v1alpha).
#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionRequest {
    #[prost(string, tag = "1")]
    host: String,
    #[prost(string, optional, tag = "4")]
    file_containing_symbol: Option<String>,
    #[prost(string, optional, tag = "7")]
    list_services: Option<String>,
}

/// Its response: the descriptor files asked for, the services, or an error.
#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionResponse {
    #[prost(message, optional, tag = "4")]
    file_descriptor_response: Option<FileDescriptors>,
    #[prost(message, optional, tag = "6")]
    list_services_response: Option<Services>,
    #[prost(message, optional, tag = "7")]
    error_response: Option<ErrorResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct FileDescriptors {
    #[prost(bytes = "vec", repeated, tag = "1")]
    file_descriptor_proto: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Services {
    #[prost(message, repeated, tag = "1")]
    service: Vec<ServiceName>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ServiceName {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ErrorResponse {
    #[prost(int32, tag = "1")]
    error_code: i32,
    #[prost(string, tag = "2")]
    error_message: String,
}

/// Where to ask: the server's address, its authority, and TLS when it is https.
#[derive(Debug)]
pub struct Server<'a> {
    pub addr: SocketAddr,
    pub authority: &'a str,
    pub tls: Option<(std::sync::Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
}

/// The schema of `service` as the server reflects it: the file defining it and its imports.
pub fn schema(server: &Server<'_>, service: &str) -> Result<DescriptorPool, String> {
    let mut last = String::new();
    for version in ["v1", "v1alpha"] {
        let path = format!("/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo");
        let ask = ReflectionRequest {
            host: String::new(),
            file_containing_symbol: Some(service.to_string()),
            list_services: None,
        };
        let list = ReflectionRequest { list_services: Some(String::new()), ..ask.clone() };
        match call(server, &path, &[ask, list])? {
            Answer::Status(12, _) => {
                last = format!("the server has no reflection service (grpc.reflection.{version}: UNIMPLEMENTED)");
            }
            Answer::Status(code, message) => {
                let name = grpc::code_name(code).unwrap_or("an unknown code");
                return Err(format!("the reflection call ended with {name}: {message}"));
            }
            Answer::Messages(answers) => return pool(&answers, service),
        }
    }
    Err(last)
}

/// What the reflection answers make: the descriptor files in a pool; the service missing is
/// an error listing the services there are.
fn pool(answers: &[Vec<u8>], service: &str) -> Result<DescriptorPool, String> {
    let mut files = Vec::new();
    let mut services = Vec::new();
    let mut error = None;
    for a in answers {
        let r = ReflectionResponse::decode(a.as_slice())
            .map_err(|e| format!("a reflection answer that does not decode: {e}"))?;
        if let Some(f) = r.file_descriptor_response {
            files.extend(f.file_descriptor_proto);
        }
        if let Some(s) = r.list_services_response {
            services.extend(s.service.into_iter().map(|s| s.name));
        }
        if let Some(e) = r.error_response {
            error = Some(e.error_message);
        }
    }
    if files.is_empty() {
        return Err(format!(
            "the server does not know {service:?}{}; it has {}",
            error.map(|e| format!(" ({e})")).unwrap_or_default(),
            if services.is_empty() { "no service listed".into() } else { services.join(", ") }
        ));
    }
    let mut protos: Vec<prost_types::FileDescriptorProto> = Vec::new();
    for f in &files {
        let p = prost_types::FileDescriptorProto::decode(f.as_slice())
            .map_err(|e| format!("a descriptor the server sent does not decode: {e}"))?;
        if !protos.iter().any(|q| q.name == p.name) {
            protos.push(p);
        }
    }
    // In any order: each file's imports among them.
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_protos(protos)
        .map_err(|e| format!("the server's descriptors do not fit together: {e}"))?;
    Ok(pool)
}

/// How the call ended: its messages (status OK), or a status and its message.
enum Answer {
    Messages(Vec<Vec<u8>>),
    Status(u32, String),
}

/// A stream, plain or TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(b),
            Conn::Tls(s) => s.write_all(b).and_then(|()| s.flush()),
        }
    }

    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(b),
            Conn::Tls(s) => s.read(b),
        }
    }
}

/// A connection to the server, plain or TLS, with a short read timeout (the exchange's own
/// limit is checked between reads).
fn connect(server: &Server<'_>) -> Result<Conn, String> {
    let io = |e: std::io::Error| format!("{}: {e}", server.addr);
    let tcp = TcpStream::connect_timeout(&server.addr, LIMIT).map_err(io)?;
    tcp.set_read_timeout(Some(Duration::from_millis(500))).map_err(io)?;
    tcp.set_nodelay(true).map_err(io)?;
    Ok(match &server.tls {
        None => Conn::Plain(tcp),
        Some((config, name)) => {
            let c = rustls::ClientConnection::new(config.clone(), name.clone())
                .map_err(|e| format!("TLS: {e}"))?;
            Conn::Tls(Box::new(rustls::StreamOwned::new(c, tcp)))
        }
    })
}

/// The connection's first bytes: the preface, SETTINGS and a large window, then the call on
/// stream 1 (its HEADERS, and `requests` framed in one DATA ending the stream).
fn request(
    server: &Server<'_>,
    path: &str,
    requests: &[ReflectionRequest],
) -> Result<Vec<u8>, String> {
    let mut out = frame::PREFACE.to_vec();
    frame::put_settings(
        &mut out,
        &[(setting::ENABLE_PUSH, 0), (setting::INITIAL_WINDOW_SIZE, 1 << 30)],
    );
    frame::put_window_update(&mut out, 0, (1 << 30) - 65_535);
    let spec = RequestSpec {
        method: "POST".into(),
        target: path.into(),
        host: server.authority.into(),
        headers: vec![
            HeaderArg { name: "content-type".into(), value: "application/grpc".into() },
            HeaderArg { name: "te".into(), value: "trailers".into() },
        ],
        body: Vec::new(),
    };
    let block = spec.encode_h2(server.tls.is_some()).map_err(|e| e.to_string())?;
    frame::put_header(&mut out, block.len(), kind::HEADERS, flag::END_HEADERS, 1);
    out.extend_from_slice(&block);
    let mut body = Vec::new();
    for r in requests {
        grpc::put_message(&mut body, &r.encode_to_vec());
    }
    frame::put_header(&mut out, body.len(), kind::DATA, flag::END_STREAM, 1);
    out.extend_from_slice(&body);
    Ok(out)
}

/// One bidirectional call of `path` sending `requests`, read to its end.
fn call(server: &Server<'_>, path: &str, requests: &[ReflectionRequest]) -> Result<Answer, String> {
    let started = Instant::now();
    let io = |e: std::io::Error| format!("{}: {e}", server.addr);
    let mut conn = connect(server)?;
    let out = request(server, path, requests)?;
    conn.write_all(&out).map_err(io)?;
    let mut dec = Decoder::new(4096, 64 * 1024);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut status, mut message, mut http) = (None, String::new(), 0u16);
    let mut data = Vec::new();
    loop {
        if started.elapsed() > LIMIT {
            return Err(format!("no whole answer within {} s", LIMIT.as_secs()));
        }
        // Whole frames first.
        while let Some(h) = Header::parse(&got) {
            if h.len > frame::DEFAULT_MAX_FRAME * 64 {
                return Err("a frame past any size asked for".into());
            }
            if got.len() < HEADER_LEN + h.len {
                break;
            }
            let payload: Vec<u8> = got[HEADER_LEN..HEADER_LEN + h.len].to_vec();
            got.drain(..HEADER_LEN + h.len);
            let mut ack = Vec::new();
            match h.kind {
                kind::SETTINGS if !h.has(flag::ACK) => frame::put_settings_ack(&mut ack),
                kind::PING if !h.has(flag::ACK) => {
                    let d: [u8; 8] = payload.as_slice().try_into().unwrap_or_default();
                    frame::put_ping(&mut ack, true, d);
                }
                kind::HEADERS if h.stream == 1 => {
                    let p = frame::unpadded(&h, &payload).map_err(|e| e.to_string())?;
                    dec.decode(p, &mut |name, value| match name {
                        b":status" => {
                            http = std::str::from_utf8(value)
                                .ok()
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0);
                        }
                        b"grpc-status" => status = grpc::parse_status(value),
                        b"grpc-message" => message = grpc::decode_message(value),
                        _ => {}
                    })
                    .map_err(|e| format!("a header block that does not decode: {e}"))?;
                    if h.has(flag::END_STREAM) {
                        return finish(http, status, message, &data);
                    }
                }
                kind::DATA if h.stream == 1 => {
                    let p = frame::unpadded(&h, &payload).map_err(|e| e.to_string())?;
                    if data.len() + p.len() > MAX_ANSWER {
                        return Err(format!("an answer over {} MiB", MAX_ANSWER >> 20));
                    }
                    data.extend_from_slice(p);
                    if !payload.is_empty() {
                        frame::put_window_update(&mut ack, 0, payload.len() as u32);
                    }
                    if h.has(flag::END_STREAM) {
                        return finish(http, status, message, &data);
                    }
                }
                kind::RST_STREAM if h.stream == 1 => {
                    let code = frame::rst_code(&h, &payload).unwrap_or(0);
                    return Err(format!("the server reset the call ({})", frame::code::name(code)));
                }
                kind::GOAWAY => return Err("the server closed the connection (GOAWAY)".into()),
                _ => {}
            }
            if !ack.is_empty() {
                conn.write_all(&ack).map_err(io)?;
            }
        }
        match conn.read(&mut buf) {
            Ok(0) => return Err("the server closed the connection before answering".into()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(io(e)),
        }
    }
}

/// The call's end: its messages with OK, else its status.
fn finish(http: u16, status: Option<u32>, message: String, data: &[u8]) -> Result<Answer, String> {
    match status {
        Some(0) => {}
        Some(code) => return Ok(Answer::Status(code, message)),
        None if http != 200 => {
            return Ok(Answer::Status(
                grpc::Fault::Http(http).code(),
                format!("HTTP status {http}"),
            ))
        }
        None => return Err("the reflection call ended without grpc-status".into()),
    }
    let mut m = grpc::Messages::new(MAX_ANSWER);
    m.feed(data).and_then(|_| m.finish()).map_err(|e| format!("the reflection answer: {e}"))?;
    let mut messages = Vec::new();
    let mut rest = data;
    // Each message whole (the reader above checked them): its prefix, then its bytes.
    while rest.len() >= grpc::PREFIX {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        messages.push(rest[grpc::PREFIX..grpc::PREFIX + len].to_vec());
        rest = &rest[grpc::PREFIX + len..];
    }
    Ok(Answer::Messages(messages))
}
