//! Debian's chromium, headless, driven over the DevTools protocol: one tab that stays open (so a
//! live page is read as a user's tab sees it, twice and after the end), its console errors,
//! uncaught exceptions and failed loads collected, and screenshots.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

pub struct Browser {
    child: Child,
    ws: WebSocket<TcpStream>,
    next: u64,
    /// Console errors, exceptions and log entries of level error, as text.
    pub errors: Vec<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromium on a blank tab, with the console and the log watched from the start.
    pub fn start(width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
            .args(["--remote-debugging-port=0", "--remote-allow-origins=*"])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium (Debian's package) runs");
        let port = devtools_port(&mut child);
        let page = page_socket(port);
        let addr = page.trim_start_matches("ws://");
        let host = addr.split('/').next().unwrap();
        let stream = TcpStream::connect(host).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (ws, _) = tungstenite::client(page.as_str(), stream).unwrap();
        let mut b = Browser { child, ws, next: 1, errors: Vec::new(), _profile: profile };
        for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
            b.call(domain, json!({}));
        }
        b
    }

    /// Sends a command and waits for its answer, taking in the events on the way.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let msg = json!({ "id": id, "method": method, "params": params }).to_string();
        self.ws.send(Message::text(msg)).unwrap();
        loop {
            let m = self.ws.read().unwrap();
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
            self.event(&v);
        }
    }

    fn event(&mut self, v: &Value) {
        let p = &v["params"];
        match v["method"].as_str() {
            Some("Runtime.consoleAPICalled") if p["type"] == "error" || p["type"] == "warning" => {
                self.errors.push(format!("console {}: {}", p["type"], p["args"]));
            }
            Some("Runtime.exceptionThrown") => {
                self.errors.push(format!("exception: {}", p["exceptionDetails"]));
            }
            Some("Log.entryAdded") if p["entry"]["level"] == "error" => {
                self.errors.push(format!("log: {}", p["entry"]));
            }
            _ => {}
        }
    }

    /// Opens `url` in the tab and waits for its load event.
    pub fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url }));
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.eval("document.readyState") != json!("complete") {
            assert!(Instant::now() < deadline, "{url} did not load");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call("Runtime.evaluate", json!({ "expression": expr, "returnByValue": true }));
        r["result"]["value"].clone()
    }

    /// The value a JavaScript promise resolves to.
    pub fn eval_async(&mut self, expr: &str) -> Value {
        let params = json!({ "expression": expr, "returnByValue": true, "awaitPromise": true });
        self.call("Runtime.evaluate", params)["result"]["value"].clone()
    }

    /// The text of the element with this id.
    pub fn text(&mut self, id: &str) -> String {
        let v = self.eval(&format!("(document.getElementById('{id}')||{{}}).textContent"));
        v.as_str().unwrap_or_default().to_string()
    }

    /// Waits until `cond` (a JavaScript expression) is true.
    pub fn wait_for(&mut self, cond: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.eval(cond) != json!(true) {
            assert!(Instant::now() < deadline, "not within {limit:?}: {cond}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the whole page.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        let r = self.call(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true }),
        );
        use base64::Engine as _;
        let png =
            base64::engine::general_purpose::STANDARD.decode(r["data"].as_str().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Takes in the events that arrived (console messages after the last call).
    pub fn drain(&mut self) {
        self.eval("0");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port chromium printed ("DevTools listening on ws://127.0.0.1:PORT/...").
fn devtools_port(child: &mut Child) -> u16 {
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let port = loop {
        let line = lines.next().expect("chromium printed its DevTools address").unwrap();
        if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
    };
    // Keep reading its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    port
}

/// The page target's WebSocket address, from /json/list (asked until the tab is listed).
fn page_socket(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").unwrap();
        let body = read_response(&mut s);
        let json = body.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let targets: Value = serde_json::from_str(json).unwrap_or(Value::Null);
        let page = targets.as_array().and_then(|a| {
            a.iter()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["webSocketDebuggerUrl"].as_str())
                .map(str::to_string)
        });
        if let Some(p) = page {
            return p;
        }
        assert!(Instant::now() < deadline, "chromium lists no tab: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP/1.1 response, read to its Content-Length (DevTools keeps the connection open).
fn read_response(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = s.read(&mut chunk).unwrap();
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if n == 0 {
            return text;
        }
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|l| body.len() >= l) {
                return text;
            }
        }
    }
}
