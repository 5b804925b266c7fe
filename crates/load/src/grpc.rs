//! `--grpc SERVICE/METHOD`: a run's options made into the HTTP/2 requests gRPC calls are
//! (gRPC's PROTOCOL-HTTP2 document): POSTs to `/SERVICE/METHOD` with `content-type:
//! application/grpc` and `te: trailers`, the deadline as `grpc-timeout`, the message framed
//! with its 5-byte prefix (by the target builder, once per variant). Everything else (pools,
//! templated IDs, connections, streams, agents) is the HTTP/2 run's own; the session judges
//! each response as a call ([`qpslab_http::grpc::Call`]).

use qpslab_http::grpc;
use qpslab_sys::config_error::ConfigError;

use crate::options::LoadOptions;
use crate::session::h2::GrpcSettings;

/// The options of a `--grpc` run as the HTTP/2 run that carries it; other options unchanged.
/// The gRPC-only flags without `--grpc`, and what a gRPC call cannot be, are refused here.
pub fn apply(o: &LoadOptions) -> Result<LoadOptions, ConfigError> {
    let Some(method) = o.grpc.as_deref() else {
        let given = [
            ("--binary", o.binary.is_some()),
            ("--grpc-timeout", o.grpc_timeout.is_some()),
            ("--max-message-size", o.max_message_size.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            return Err(ConfigError::new(flag, "applies to gRPC calls; add --grpc SERVICE/METHOD"));
        }
        return Ok(o.clone());
    };
    let path = method_path(method)?;
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
    if o.binary.is_some() && (o.body.is_some() || o.body_lines.is_some()) {
        return Err(ConfigError::new(
            "--binary",
            "the message comes from one of --binary, --body or --body-lines: drop the others",
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
    // -H comes after: a header given there replaces the one above (metadata, or another
    // content-type such as application/grpc+proto).
    let named = |h: &String| h.split(':').next().unwrap_or("").trim().to_ascii_lowercase();
    let given: Vec<String> = o.headers.iter().map(named).collect();
    headers.retain(|h| !given.contains(&named(h)));
    headers.extend(o.headers.iter().cloned());
    Ok(LoadOptions {
        urls,
        h2: true,
        method: "POST".into(),
        headers,
        body: o.binary.clone().or_else(|| o.body.clone()),
        binary: None,
        ..o.clone()
    })
}

/// How calls of a `--grpc` run are judged.
pub fn settings(o: &LoadOptions) -> Option<GrpcSettings> {
    o.grpc.as_ref().map(|_| GrpcSettings {
        max_message: o.max_message_size.unwrap_or(grpc::DEFAULT_MAX_MESSAGE as u32),
        unary: true,
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
        assert_eq!(flag(grpc("a/b", both)), "--binary");
        let alone = LoadOptions {
            grpc_timeout: Some(std::time::Duration::from_secs(1)),
            ..LoadOptions::default()
        };
        assert_eq!(apply(&alone).unwrap_err().flag, "--grpc-timeout");
    }
}
