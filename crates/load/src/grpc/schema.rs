//! gRPC schemas without generated code: `.proto` files compiled at start by protox (a
//! protobuf compiler in Rust; no protoc), or descriptor sets (`--protoset`, as `protoc -o` and
//! `buf build` write them), or the compiled set a coordinator shipped to its agents. The
//! method's request type encodes messages from JSON (protobuf's JSON mapping) through
//! prost-reflect, once, before the run: the hot path sends bytes.

use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor};
use qpslab_sys::config_error::ConfigError;

use crate::options::{Body, LoadOptions};

/// The schema the options name: `--proto` files (with `--import-path`), `--protoset` files,
/// or the one already compiled (`grpc_schema`); None when none is given.
pub fn load(o: &LoadOptions) -> Result<Option<DescriptorPool>, ConfigError> {
    if let Some(compiled) = &o.grpc_schema {
        let pool = DescriptorPool::decode(compiled.0.as_slice())
            .map_err(|e| ConfigError::new("--proto", format!("the compiled schema: {e}")))?;
        return Ok(Some(pool));
    }
    if o.reflect {
        if !o.proto.is_empty() || !o.protoset.is_empty() {
            return Err(ConfigError::new(
                "--reflect",
                "the schema comes from the server or from files: drop --reflect or --proto/--protoset",
            ));
        }
        return reflected(o).map(Some);
    }
    if o.proto.is_empty() && o.protoset.is_empty() {
        if !o.import_path.is_empty() {
            return Err(ConfigError::new(
                "--import-path",
                "is where --proto files import from: add --proto FILE",
            ));
        }
        return Ok(None);
    }
    let mut pool = if o.proto.is_empty() { DescriptorPool::new() } else { compile(o)? };
    for file in &o.protoset {
        let bytes = std::fs::read(file).map_err(|e| {
            ConfigError::new(
                "--protoset",
                format!("cannot read {file:?}: {}", qpslab_sys::net::message(&e)),
            )
        })?;
        pool.decode_file_descriptor_set(bytes.as_slice()).map_err(|e| {
            ConfigError::new(
                "--protoset",
                format!("{file:?} is not a descriptor set (protoc -o FILE --include_imports writes one): {e}"),
            )
        })?;
    }
    Ok(Some(pool))
}

/// The schema the server at the first URL reflects, for `--grpc`'s service.
fn reflected(o: &LoadOptions) -> Result<DescriptorPool, ConfigError> {
    let bad = |m: String| ConfigError::new("--reflect", m);
    let raw = o.urls.first().ok_or_else(|| bad("give the server's URL".into()))?;
    let full = crate::target::with_default_scheme(raw).unwrap_or_else(|| raw.clone());
    let url = url::Url::parse(&full).map_err(|e| bad(format!("{raw:?}: {e}")))?;
    let host = url.host_str().ok_or_else(|| bad(format!("{raw:?} has no host")))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let lookup = host.trim_start_matches('[').trim_end_matches(']');
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(lookup, port))
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| bad(format!("cannot resolve {host:?}")))?;
    let tls = if url.scheme() == "https" {
        let client = crate::tls::TlsClient::new(&o.tls, true)?;
        Some((client.config, crate::tls::server_name(host, o.tls.sni.as_deref())?))
    } else {
        None
    };
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let service = o.grpc.as_deref().unwrap_or("").trim_start_matches('/');
    let service = service.split_once('/').map_or(service, |(s, _)| s);
    let server = super::reflect::Server { addr, authority: &authority, tls };
    super::reflect::schema(&server, service).map_err(|e| bad(format!("{raw}: {e}")))
}

/// The `--proto` files compiled, their imports found under `--import-path` (or, without it,
/// in each file's own directory).
fn compile(o: &LoadOptions) -> Result<DescriptorPool, ConfigError> {
    let dirs: Vec<std::path::PathBuf> = if o.import_path.is_empty() {
        let parent = |p: &String| {
            let dir = std::path::Path::new(p).parent().map(std::path::Path::to_path_buf);
            dir.filter(|d| !d.as_os_str().is_empty()).unwrap_or_else(|| ".".into())
        };
        let mut d: Vec<_> = o.proto.iter().map(parent).collect();
        d.dedup();
        d
    } else {
        o.import_path.iter().map(Into::into).collect()
    };
    for p in &o.proto {
        if !std::path::Path::new(p).is_file() {
            return Err(ConfigError::new("--proto", format!("{p:?}: no such file")));
        }
    }
    let mut c = protox::Compiler::new(&dirs)
        .map_err(|e| ConfigError::new("--import-path", e.to_string()))?;
    c.include_imports(true);
    c.open_files(&o.proto).map_err(|e| ConfigError::new("--proto", one_line(&e)))?;
    Ok(c.descriptor_pool())
}

/// protox's error with its cause, on one line.
fn one_line(e: &protox::Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s.replace('\n', " ")
}

/// The method `service`/`method` of the schema; an error lists what the schema has.
pub fn method(
    pool: &DescriptorPool,
    service: &str,
    method: &str,
) -> Result<MethodDescriptor, ConfigError> {
    let Some(s) = pool.get_service_by_name(service) else {
        let names: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
        return Err(ConfigError::new(
            "--grpc",
            format!(
                "no service {service:?} in the schema; it has {}",
                if names.is_empty() { "none".into() } else { names.join(", ") }
            ),
        ));
    };
    let found = s.methods().find(|m| m.name() == method);
    found.ok_or_else(|| {
        let names: Vec<String> = s.methods().map(|m| m.name().to_string()).collect();
        ConfigError::new(
            "--grpc",
            format!("no method {method:?} in service {service}; it has {}", names.join(", ")),
        )
    })
}

/// `json` (protobuf's JSON mapping) as a message of type `desc`, serialized.
pub fn encode(desc: &MessageDescriptor, json: &str) -> Result<Body, String> {
    decode_json(desc, json).map(|m| Body(m.encode_to_vec()))
}

/// `json` (protobuf's JSON mapping) as a message of type `desc`.
pub fn decode_json(desc: &MessageDescriptor, json: &str) -> Result<DynamicMessage, String> {
    let mut de = serde_json::Deserializer::from_str(json);
    DynamicMessage::deserialize(desc.clone(), &mut de)
        .and_then(|m| de.end().map(|()| m))
        .map_err(|e| format!("not a {} in JSON: {e}", desc.full_name()))
}

/// The schema compiled, for agents on hosts without its files.
pub fn compiled(pool: &DescriptorPool) -> Body {
    Body(pool.encode_to_vec())
}
