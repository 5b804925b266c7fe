//! tonic's gRPC server on one tokio thread: any unary method of the service `echo.Echo` is
//! answered with the request's own message (messages are bytes: no generated code, a codec
//! that passes them through). The peer server for qpslab's gRPC measurements, and a second
//! implementation to check `load --grpc` against: it counts the calls it answered and prints
//! the count for each line read on stdin. Prints "ready PORT" once listening on 127.0.0.1.
//! Usage: grpc-server [PORT]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use tokio::io::AsyncBufReadExt;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Request, Response, Status};

fn main() {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(serve(port));
}

async fn serve(port: u16) {
    let calls = Arc::new(AtomicU64::new(0));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    println!("ready {}", listener.local_addr().expect("address").port());
    let counted = calls.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(_)) = lines.next_line().await {
            println!("{}", counted.load(Ordering::Relaxed));
        }
        std::process::exit(0);
    });
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .add_service(EchoServer { calls })
        .serve_with_incoming(incoming)
        .await
        .expect("serve");
}

/// Messages as they are: bytes in, bytes out.
#[derive(Debug, Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// One unary call: its message back, counted.
struct Echo(Arc<AtomicU64>);

impl tonic::server::UnaryService<Bytes> for Echo {
    type Response = Bytes;
    type Future = std::future::Ready<Result<Response<Bytes>, Status>>;
    fn call(&mut self, req: Request<Bytes>) -> Self::Future {
        self.0.fetch_add(1, Ordering::Relaxed);
        std::future::ready(Ok(Response::new(req.into_inner())))
    }
}

/// The service `echo.Echo`: every method echoes.
#[derive(Clone)]
struct EchoServer {
    calls: Arc<AtomicU64>,
}

impl tonic::server::NamedService for EchoServer {
    const NAME: &'static str = "echo.Echo";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<B> tower_service::Service<http::Request<B>> for EchoServer
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::BoxBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let calls = self.calls.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(Raw);
            Ok(grpc.unary(Echo(calls), req).await)
        })
    }
}
