//! `--grpc SERVICE/METHOD`: a run's options made into the HTTP/2 requests gRPC calls are
//! (gRPC's PROTOCOL-HTTP2 document): POSTs to `/SERVICE/METHOD` with `content-type:
//! application/grpc` and `te: trailers`, the deadline as `grpc-timeout`, the message framed
//! with its 5-byte prefix (by the target builder, once per variant). Everything else (pools,
//! templated IDs, connections, streams, agents) is the HTTP/2 run's own; the session judges
//! each response as a call ([`qpslab_http::grpc::Call`]). Messages given as JSON are encoded
//! by the schema ([`schema`]).

pub mod reflect;
pub mod schema;

use qpslab_http::grpc;
use qpslab_sys::config_error::ConfigError;

use crate::options::LoadOptions;
use crate::session::h2::GrpcSettings;

/// `--check-response`: the message the first OK answer must be, and how to read answers.
#[derive(Debug, Clone)]
pub struct ResponseCheck {
    /// The file it came from, as given.
    pub file: String,
    /// The method's response type.
    pub output: prost_reflect::MessageDescriptor,
    pub expected: prost_reflect::DynamicMessage,
}

impl ResponseCheck {
    /// Whether `got` (a response message's bytes) is the expected message, and it as JSON
    /// (or why it does not decode).
    pub fn judge(&self, got: &[u8]) -> (bool, String) {
        match prost_reflect::DynamicMessage::decode(self.output.clone(), got) {
            Ok(m) => (m == self.expected, serde_json::to_string(&m).unwrap_or_default()),
            Err(e) => {
                (false, format!("{} bytes that are no {}: {e}", got.len(), self.output.full_name()))
            }
        }
    }
}

/// The options of a `--grpc` run as the HTTP/2 run that carries it; other options unchanged.
/// The gRPC-only flags without `--grpc`, and what a gRPC call cannot be, are refused here.
pub fn apply(o: &LoadOptions) -> Result<LoadOptions, ConfigError> {
    configure(o).map(|(o, _)| o)
}

/// What a gRPC run needs beside its HTTP/2 options: how calls are judged, and
/// `--check-response`'s check.
#[derive(Debug, Clone)]
pub struct Grpc {
    /// The method called, `/SERVICE/METHOD`.
    pub method: String,
    pub settings: GrpcSettings,
    pub check: Option<ResponseCheck>,
}

/// [`apply`], and how the calls are judged (None without `--grpc`).
pub fn configure(o: &LoadOptions) -> Result<(LoadOptions, Option<Grpc>), ConfigError> {
    let Some(method) = o.grpc.as_deref() else {
        let given = [
            ("--check-response", o.check_response.is_some()),
            ("--stream-messages", o.stream_messages.is_some()),
            ("--binary", o.binary.is_some()),
            ("--data", o.data.is_some()),
            ("--data-file", o.data_file.is_some()),
            ("--proto", !o.proto.is_empty()),
            ("--protoset", !o.protoset.is_empty()),
            ("--reflect", o.reflect),
            ("--grpc-timeout", o.grpc_timeout.is_some()),
            ("--max-message-size", o.max_message_size.is_some()),
            ("--grpc-encoding", o.grpc_encoding.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            return Err(ConfigError::new(flag, "applies to gRPC calls; add --grpc SERVICE/METHOD"));
        }
        return Ok((o.clone(), None));
    };
    let path = method_path(method)?;
    if o.stream_messages.is_some_and(|n| n == 0 || n > 10_000) {
        return Err(ConfigError::new("--stream-messages", "must be between 1 and 10000"));
    }
    let (messages, check, kind) = messages(o, &path)?;
    let streaming = kind.map_or(o.stream_messages.is_some(), |(client, server)| client || server);
    let settings = GrpcSettings {
        max_message: o.max_message_size.unwrap_or(grpc::DEFAULT_MAX_MESSAGE as u32),
        // Unary and client-streaming calls are answered with one message.
        one_response: kind.map_or(!streaming, |(_, server)| !server),
        streaming,
        keep_first: check.is_some(),
        compressed: o.grpc_encoding.is_some(),
    };
    if o.h3 {
        return Err(ConfigError::new("--h3", "gRPC runs over HTTP/2 here: drop --h3"));
    }
    if !["GET", "POST"].contains(&o.method.as_str()) {
        return Err(ConfigError::new("--method", "gRPC calls are POSTs: drop --method"));
    }
    for (flag, given) in [("--urls", o.urls_file.is_some()), ("--targets", o.targets.is_some())] {
        if given {
            return Err(ConfigError::new(
                flag,
                "a gRPC run calls one method at the URL's server: give messages with \
                 --body-lines FILE (one per line) instead",
            ));
        }
    }
    let sources = [
        ("--data", o.data.is_some()),
        ("--data-file", o.data_file.is_some()),
        ("--binary", o.binary.is_some()),
        ("--body", o.body.is_some()),
        ("--body-lines", o.body_lines.is_some()),
    ];
    let mut given = sources.iter().filter(|(_, g)| *g);
    if let (Some(_), Some((flag, _))) = (given.next(), given.next()) {
        return Err(ConfigError::new(
            flag,
            "the message comes from one of --data, --data-file, --binary, --body or \
             --body-lines: keep one",
        ));
    }
    if o.urls.is_empty() {
        return Err(ConfigError::new(
            "URL",
            "no server given; e.g. http://127.0.0.1:50051 (https:// for gRPC over TLS)",
        ));
    }
    let urls = o.urls.iter().map(|u| call_url(u, &path)).collect::<Result<Vec<_>, _>>()?;
    let mut headers = vec!["content-type: application/grpc".to_string(), "te: trailers".into()];
    if let Some(d) = o.grpc_timeout {
        headers.push(format!("grpc-timeout: {}", grpc::timeout_value(d)));
    }
    if o.grpc_encoding.is_some() {
        refuse_templates(o, &messages)?;
        headers.push("grpc-encoding: gzip".into());
        headers.push("grpc-accept-encoding: gzip".into());
    }
    // -H comes after: a header given there replaces the one above (metadata, or another
    // content-type such as application/grpc+proto).
    let named = |h: &String| h.split(':').next().unwrap_or("").trim().to_ascii_lowercase();
    let given: Vec<String> = o.headers.iter().map(named).collect();
    headers.retain(|h| !given.contains(&named(h)));
    headers.extend(o.headers.iter().cloned());
    let o = LoadOptions {
        urls,
        h2: true,
        method: "POST".into(),
        headers,
        body: messages.one.or_else(|| o.binary.clone()).or_else(|| o.body.clone()),
        binary: None,
        // The pool's file names its lines (reports, --group-by, agents' file transfer).
        body_lines: o.data_file.clone().or_else(|| o.body_lines.clone()),
        grpc_messages: messages.pool,
        ..o.clone()
    };
    Ok((o, Some(Grpc { method: path, settings, check })))
}

/// `--grpc-encoding`: a message is compressed once, before the run, so a templated ID
/// (`{seq}`, `{rand}`) in it could not be written per call: refused, naming where it is.
fn refuse_templates(o: &LoadOptions, messages: &Encoded) -> Result<(), ConfigError> {
    let one = [
        ("--data", messages.one.as_ref()),
        ("--binary", o.binary.as_ref()),
        ("--body", o.body.as_ref()),
    ];
    let one = one.into_iter().filter_map(|(flag, b)| b.map(|b| (flag, b.0.as_slice())));
    let pool = messages.pool.iter().map(|(_, m)| ("--data-file", m.0.as_slice()));
    // --body-lines are the messages only when no --data-file gave them.
    let lines = o.body_lines.iter().filter(|_| messages.pool.is_empty());
    let lines = lines.map(|f| ("--body-lines", f.text.as_bytes()));
    for (flag, bytes) in one.chain(pool).chain(lines) {
        if crate::template::scan(bytes, 0).map_or(true, |t| !t.is_empty()) {
            return Err(ConfigError::new(
                flag,
                "holds a templated ID ({seq} or {rand}), which cannot be written into a message \
                 compressed before the run: drop it or --grpc-encoding",
            ));
        }
    }
    Ok(())
}

/// The messages given as JSON, encoded.
#[derive(Default)]
struct Encoded {
    /// `--data`.
    one: Option<crate::options::Body>,
    /// `--data-file`'s lines.
    pool: Vec<(u32, crate::options::Body)>,
}

/// A method's streaming as the schema says: (client streams, server streams).
type Kind = (bool, bool);

/// `--data` or `--data-file` encoded by the schema's request type of the method at `path`,
/// and `--check-response`'s message by its response type; the schema checked to have the
/// method even without them, and the method's streaming (None without a schema).
fn messages(
    o: &LoadOptions,
    path: &str,
) -> Result<(Encoded, Option<ResponseCheck>, Option<Kind>), ConfigError> {
    let pool = schema::load(o)?;
    let Some(pool) = pool else {
        let json = [
            ("--data", o.data.is_some()),
            ("--data-file", o.data_file.is_some()),
            ("--check-response", o.check_response.is_some()),
        ];
        if let Some((flag, _)) = json.iter().find(|(_, g)| *g) {
            return Err(ConfigError::new(
                flag,
                "a JSON message needs the schema: give --proto FILE or --protoset FILE (or \
                 the serialized message with --binary FILE)",
            ));
        }
        return Ok((Encoded::default(), None, None));
    };
    let (service, name) = path[1..].split_once('/').unwrap_or_default();
    let method = schema::method(&pool, service, name)?;
    let kind = (method.is_client_streaming(), method.is_server_streaming());
    if o.stream_messages.is_some_and(|n| n > 1) && !kind.0 {
        return Err(ConfigError::new(
            "--stream-messages",
            format!(
                "{service}/{name} takes one request message (its requests are no stream): \
                 drop it"
            ),
        ));
    }
    let check = o.check_response.as_ref().map(|f| {
        let output = method.output();
        let bad = |e: String| ConfigError::new("--check-response", format!("{}: {e}", f.name));
        let expected = schema::decode_json(&output, &f.text).map_err(bad)?;
        Ok::<_, ConfigError>(ResponseCheck { file: f.name.clone(), output, expected })
    });
    let check = check.transpose()?;
    let input = method.input();
    let mut out = Encoded::default();
    if let Some(json) = &o.data {
        let m = schema::encode(&input, json).map_err(|e| ConfigError::new("--data", e))?;
        out.one = Some(m);
    }
    if let Some(file) = &o.data_file {
        for (i, line) in file.text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let m = schema::encode(&input, line).map_err(|e| {
                ConfigError::new("--data-file", format!("{} line {}: {e}", file.name, i + 1))
            })?;
            out.pool.push((u32::try_from(i + 1).unwrap_or(u32::MAX), m));
        }
        if out.pool.is_empty() {
            return Err(ConfigError::new(
                "--data-file",
                format!("{} has no message; write one JSON message per line", file.name),
            ));
        }
    }
    Ok((out, check, Some(kind)))
}

/// These options with their schema compiled into them (`grpc_schema`), for agents on hosts
/// without the `--proto` and `--protoset` files.
pub fn portable(o: &LoadOptions) -> Result<LoadOptions, ConfigError> {
    if o.grpc.is_none() || (o.proto.is_empty() && o.protoset.is_empty() && !o.reflect) {
        return Ok(o.clone());
    }
    let pool = schema::load(o)?;
    Ok(LoadOptions {
        grpc_schema: pool.as_ref().map(schema::compiled),
        proto: Vec::new(),
        protoset: Vec::new(),
        import_path: Vec::new(),
        reflect: false,
        ..o.clone()
    })
}

/// `/SERVICE/METHOD` of `--grpc`'s value (a leading `/` is taken too).
fn method_path(method: &str) -> Result<String, ConfigError> {
    let bare = method.strip_prefix('/').unwrap_or(method);
    let valid = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && !b"/?#%{}".contains(&b))
    };
    match bare.split_once('/') {
        Some((service, m)) if valid(service) && valid(m) => Ok(format!("/{service}/{m}")),
        _ => Err(ConfigError::new(
            "--grpc",
            format!("{method:?}: give SERVICE/METHOD, e.g. helloworld.Greeter/SayHello"),
        )),
    }
}

/// The server's URL with the method's path; a URL with its own path is refused (gRPC's path
/// is the method's).
fn call_url(url: &str, path: &str) -> Result<String, ConfigError> {
    let full = crate::target::with_default_scheme(url).unwrap_or_else(|| url.to_string());
    let mut u = url::Url::parse(&full).map_err(|e| {
        ConfigError::new(
            "URL",
            format!("{url:?} is not a valid URL ({e}); e.g. http://127.0.0.1:50051"),
        )
    })?;
    if !matches!(u.path(), "" | "/") || u.query().is_some() {
        return Err(ConfigError::new(
            "URL",
            format!(
                "{url:?}: with --grpc the path is the method's ({path}); give the server \
                 alone, e.g. http://127.0.0.1:50051"
            ),
        ));
    }
    u.set_path(path);
    Ok(u.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    fn grpc(
        method: &str,
        extra: impl FnOnce(&mut LoadOptions),
    ) -> Result<LoadOptions, ConfigError> {
        let mut o = LoadOptions {
            urls: vec!["127.0.0.1:50051".into()],
            grpc: Some(method.into()),
            ..LoadOptions::default()
        };
        extra(&mut o);
        apply(&o)
    }

    #[test]
    fn a_call_is_a_post_to_the_methods_path_with_grpcs_headers() {
        let o = grpc("helloworld.Greeter/SayHello", |o| {
            o.grpc_timeout = Some(std::time::Duration::from_millis(250));
            o.headers = vec!["x-tenant: 7".into(), "Content-Type: application/grpc+proto".into()];
            o.body = Some(crate::options::Body(b"\x0a\x03abc".to_vec()));
        })
        .unwrap();
        assert_eq!(o.urls, ["http://127.0.0.1:50051/helloworld.Greeter/SayHello"]);
        assert!(o.h2);
        assert_eq!(o.method, "POST");
        assert_eq!(
            o.headers,
            [
                "te: trailers",
                "grpc-timeout: 250000u",
                "x-tenant: 7",
                "Content-Type: application/grpc+proto"
            ]
        );
        assert_eq!(o.body.unwrap().0, b"\x0a\x03abc");
        assert_eq!(grpc("/a.B/C", |_| {}).unwrap().urls, ["http://127.0.0.1:50051/a.B/C"]);
    }

    const PROTO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/proto/echo.proto");

    /// Options with the test schema and `extra`.
    fn with_schema(
        method: &str,
        extra: impl FnOnce(&mut LoadOptions),
    ) -> Result<LoadOptions, ConfigError> {
        grpc(method, |o| {
            o.proto = vec![PROTO.into()];
            extra(o);
        })
    }

    #[test]
    fn json_messages_are_encoded_once_by_the_compiled_schema() {
        let o = with_schema("test.Echo/Echo", |o| o.data = Some(r#"{"name": "hello"}"#.into()))
            .unwrap();
        assert_eq!(o.body.unwrap().0, b"\x0a\x05hello");
        // A message of the imported file, nested and repeated, and a number.
        let json = r#"{"name": "a", "n": 300, "tags": [{"key": "k"}]}"#;
        let o = with_schema("test.Echo/Echo", |o| o.data = Some(json.into())).unwrap();
        assert_eq!(o.body.unwrap().0, b"\x0a\x01a\x10\xac\x02\x1a\x03\x0a\x01k");
        // A pool: one message per line, blank lines skipped, each with its line.
        let text = "{\"name\": \"a\"}\n\n{\"n\": 1}\n".to_string();
        let file = crate::options::FileText { name: "calls.jsonl".into(), text };
        let o = with_schema("test.Echo/Echo", |o| o.data_file = Some(file)).unwrap();
        let pool: Vec<(u32, &[u8])> =
            o.grpc_messages.iter().map(|(n, m)| (*n, m.0.as_slice())).collect();
        assert_eq!(pool, [(1, &b"\x0a\x01a"[..]), (3, &b"\x10\x01"[..])]);
        assert_eq!(o.body_lines.unwrap().name, "calls.jsonl");
        // Shipped compiled, the schema encodes the same without its files.
        let given = LoadOptions {
            data: Some(json.into()),
            ..with_schema("test.Echo/Echo", |_| {}).unwrap()
        };
        let mut shipped = portable(&LoadOptions { proto: vec![PROTO.into()], ..given }).unwrap();
        assert!(shipped.proto.is_empty() && shipped.grpc_schema.is_some());
        shipped.urls = vec!["127.0.0.1:1".into()];
        let o = apply(&shipped).unwrap();
        assert_eq!(o.body.unwrap().0, b"\x0a\x01a\x10\xac\x02\x1a\x03\x0a\x01k");
    }

    /// A descriptor set (`--protoset`, as protoc -o writes one) gives the same encoding as
    /// the .proto file; a file that is no descriptor set is named.
    #[test]
    fn a_protoset_is_a_schema_too() {
        let dir = tempfile::tempdir().unwrap();
        let set = dir.path().join("echo.protoset");
        let files = LoadOptions { proto: vec![PROTO.into()], ..LoadOptions::default() };
        let pool = schema::load(&files).unwrap().unwrap();
        std::fs::write(&set, schema::compiled(&pool).0).unwrap();
        let json = r#"{"name": "a", "n": 300, "tags": [{"key": "k"}]}"#;
        let o = grpc("test.Echo/Echo", |o| {
            o.protoset = vec![set.display().to_string()];
            o.data = Some(json.into());
        })
        .unwrap();
        assert_eq!(o.body.unwrap().0, b"\x0a\x01a\x10\xac\x02\x1a\x03\x0a\x01k");
        let e = grpc("test.Echo/Echo", |o| o.protoset = vec![PROTO.into()]).unwrap_err();
        assert_eq!(e.flag, "--protoset");
        assert!(e.message.contains("is not a descriptor set"), "{}", e.message);
    }

    #[test]
    fn a_schema_that_does_not_fit_the_call_is_named() {
        let err = |r: Result<LoadOptions, ConfigError>| {
            let e = r.unwrap_err();
            (e.flag, e.message)
        };
        let (flag, m) = err(with_schema("test.Echo/Nope", |_| {}));
        assert_eq!(flag, "--grpc");
        assert_eq!(
            m,
            "no method \"Nope\" in service test.Echo; it has Echo, Exhaust, Big, Sink, Distinct, Updates, Upload, Chat"
        );
        let (_, m) = err(with_schema("test.Other/Echo", |_| {}));
        assert_eq!(m, "no service \"test.Other\" in the schema; it has test.Echo");
        // Several request messages for a method whose requests are no stream; the kinds a
        // schema gives set how answers are judged.
        let (flag, m) = err(with_schema("test.Echo/Updates", |o| o.stream_messages = Some(3)));
        assert_eq!(flag, "--stream-messages");
        assert!(m.starts_with("test.Echo/Updates takes one request message"), "{m}");
        let kind = |method: &str| {
            let o = LoadOptions {
                urls: vec!["127.0.0.1:50051".into()],
                grpc: Some(method.into()),
                proto: vec![PROTO.into()],
                ..LoadOptions::default()
            };
            let s = configure(&o).unwrap().1.unwrap().settings;
            (s.one_response, s.streaming)
        };
        assert_eq!(kind("test.Echo/Echo"), (true, false));
        assert_eq!(kind("test.Echo/Updates"), (false, true));
        assert_eq!(kind("test.Echo/Upload"), (true, true));
        assert_eq!(kind("test.Echo/Chat"), (false, true));
        let (flag, m) =
            err(with_schema("test.Echo/Echo", |o| o.data = Some(r#"{"nme": 1}"#.into())));
        assert_eq!(flag, "--data");
        assert!(m.starts_with("not a test.Hello in JSON: ") && m.contains("nme"), "{m}");
        let (flag, m) = err(grpc("test.Echo/Echo", |o| o.data = Some("{}".into())));
        assert_eq!(flag, "--data");
        assert!(m.contains("--proto FILE"), "{m}");
        let (flag, m) =
            err(with_schema("test.Echo/Echo", |o| o.proto = vec!["/nonexistent.proto".into()]));
        assert_eq!((flag, m.as_str()), ("--proto", "\"/nonexistent.proto\": no such file"));
        // An import that is not under the import path given.
        let (flag, m) = err(with_schema("test.Echo/Echo", |o| o.import_path = vec!["/tmp".into()]));
        assert_eq!(flag, "--proto");
        assert!(!m.contains('\n'), "{m}");
        let text = "{\"name\": \"a\"}\n{\"n\": \"x\"}\n".to_string();
        let file = crate::options::FileText { name: "calls.jsonl".into(), text };
        let (flag, m) = err(with_schema("test.Echo/Echo", |o| o.data_file = Some(file)));
        assert_eq!(flag, "--data-file");
        assert!(m.starts_with("calls.jsonl line 2: not a test.Hello in JSON"), "{m}");
        let both = |o: &mut LoadOptions| {
            o.data = Some("{}".into());
            o.body = Some(crate::options::Body(vec![1]));
        };
        assert_eq!(err(with_schema("test.Echo/Echo", both)).0, "--body");
    }

    #[test]
    fn what_a_grpc_call_cannot_be_is_refused_with_the_flag_named() {
        let flag = |r: Result<LoadOptions, ConfigError>| r.unwrap_err().flag;
        assert_eq!(flag(grpc("SayHello", |_| {})), "--grpc");
        assert_eq!(flag(grpc("a/b/c", |_| {})), "--grpc");
        assert_eq!(flag(grpc("a/ b", |_| {})), "--grpc");
        assert_eq!(flag(grpc("a/b", |o| o.h3 = true)), "--h3");
        assert_eq!(flag(grpc("a/b", |o| o.method = "PUT".into())), "--method");
        assert_eq!(flag(grpc("a/b", |o| o.urls = vec!["http://h:1/x".into()])), "URL");
        let both = |o: &mut LoadOptions| {
            o.binary = Some(crate::options::Body(vec![1]));
            o.body = Some(crate::options::Body(vec![2]));
        };
        assert_eq!(flag(grpc("a/b", both)), "--body", "the second source named");
        let alone = LoadOptions {
            grpc_timeout: Some(std::time::Duration::from_secs(1)),
            ..LoadOptions::default()
        };
        assert_eq!(apply(&alone).unwrap_err().flag, "--grpc-timeout");
    }
}
