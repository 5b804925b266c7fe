//! The `--targets FILE` format: one request per line, `METHOD URL [Name: value]...
//! [body=TEXT|body=@FILE] [weight=N] [name=NAME]`.

use qpslab_http::HeaderArg;
use qpslab_sys::config_error::ConfigError;

/// Highest weight of one target (keeps a group's request cycle small).
pub const MAX_WEIGHT: u32 = 1000;

/// One line of a targets file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetLine {
    pub method: String,
    pub url: String,
    pub headers: Vec<HeaderArg>,
    pub weight: u32,
    /// `body=TEXT` (no blanks), or `body=@FILE` (read by the caller: this parser reads no
    /// file).
    pub body: Option<LineBody>,
    /// `name=NAME`: what the report calls it (and groups it by, with `--group-by name`).
    pub name: Option<String>,
    /// Its line in the file (from 1; 0: not from a file).
    pub line: u32,
}

/// A targets-file line's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineBody {
    Text(String),
    File(String),
}

/// Reads a targets file: one request per line, `METHOD URL [Name: value]... [weight=N]`.
/// A header runs from its `Name:` word to the next `Name:` word (values may contain blanks).
/// Blank lines and lines starting with `#` are skipped.
pub fn read_file(file: &crate::file_text::FileText) -> Result<Vec<TargetLine>, ConfigError> {
    let lines = parse(&file.text).map_err(|(line, msg)| {
        ConfigError::new("--targets", format!("{} line {line}: {msg}", file.name))
    })?;
    if lines.is_empty() {
        return Err(ConfigError::new(
            "--targets",
            format!("{} has no request line; write e.g. 'GET http://127.0.0.1:8080/'", file.name),
        ));
    }
    Ok(lines)
}

/// Parses targets-file text; errors carry the 1-based line number.
pub fn parse(text: &str) -> Result<Vec<TargetLine>, (usize, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |m: String| (i + 1, m);
        let mut words: Vec<&str> = line.split_whitespace().collect();
        let mut weight = 1;
        let mut body = None;
        let mut name = None;
        // The last words: weight=N, body=... and name=..., in any order.
        for _ in 0..3 {
            if let Some(w) = words.last().and_then(|w| w.strip_prefix("weight=")) {
                weight = match w.parse::<u32>() {
                    Ok(n) if (1..=MAX_WEIGHT).contains(&n) => n,
                    _ => {
                        return Err(err(format!(
                            "weight={w} is not a whole number from 1 to {MAX_WEIGHT}"
                        )))
                    }
                };
                words.pop();
            } else if let Some(n) = words.last().and_then(|w| w.strip_prefix("name=")) {
                if n.is_empty() {
                    return Err(err("name= is empty; write name=NAME (no blanks)".into()));
                }
                name = Some(n.to_string());
                words.pop();
            } else if let Some(b) = words.last().and_then(|w| w.strip_prefix("body=")) {
                body = Some(match b.strip_prefix('@') {
                    Some("") => return Err(err("body=@ names no file; write body=@FILE".into())),
                    Some(path) => LineBody::File(path.to_string()),
                    None => LineBody::Text(b.to_string()),
                });
                words.pop();
            }
        }
        let [method, url, rest @ ..] = words.as_slice() else {
            return Err(err(format!(
                "{line:?}: write METHOD URL [Name: value]... [body=TEXT|body=@FILE] [weight=N] [name=NAME], e.g. 'GET http://127.0.0.1:8080/'"
            )));
        };
        let mut headers: Vec<String> = Vec::new();
        for w in rest {
            let starts_header = w.ends_with(':') && w.len() > 1;
            match headers.last_mut() {
                Some(h) if !starts_header => {
                    h.push(' ');
                    h.push_str(w);
                }
                None if !starts_header => {
                    return Err(err(format!(
                        "{w:?} after the URL is not a header; write 'Name: value', then body=..., weight=N and name=NAME last"
                    )))
                }
                _ => headers.push((*w).to_string()),
            }
        }
        let headers = headers
            .iter()
            .map(|h| HeaderArg::parse(h).map_err(|e| err(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        let (method, url) = (method.to_string(), url.to_string());
        let line = u32::try_from(i + 1).unwrap_or(u32::MAX);
        out.push(TargetLine { method, url, headers, weight, body, name, line });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_lines_with_headers_and_weights() {
        let text =
            "# comment\n\nGET http://a/ weight=3\nPOST http://b/x X-A: one two Accept: */*\n";
        let lines = parse(text).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!((lines[0].method.as_str(), lines[0].weight), ("GET", 3));
        assert_eq!(lines[1].headers.len(), 2);
        assert_eq!(lines[1].headers[0].value, "one two");
        assert_eq!(lines[1].headers[1].name, "Accept");
        assert_eq!(parse("GET http://a/ stray").unwrap_err().0, 1);
        assert_eq!(parse("GET\n").unwrap_err().0, 1);
        assert_eq!(parse("\nGET http://a/ weight=0").unwrap_err().0, 2);
        assert_eq!(parse("GET http://a/ Bad Name: x").unwrap_err().0, 1);
        let lines = parse(
            "POST http://a/ X: 1 body={\"k\":1} weight=2\nPUT http://b/ weight=1 body=@b.json\n",
        )
        .unwrap();
        assert_eq!(
            (lines[0].weight, &lines[0].body),
            (2, &Some(LineBody::Text("{\"k\":1}".into())))
        );
        assert_eq!(lines[0].headers.len(), 1);
        assert_eq!(lines[1].body, Some(LineBody::File("b.json".into())));
        assert_eq!(parse("POST http://a/ body=@").unwrap_err().0, 1);
        let lines = parse("GET http://a/ name=home weight=2 body=x\nGET http://b/\n").unwrap();
        assert_eq!((lines[0].name.as_deref(), lines[0].weight), (Some("home"), 2));
        assert_eq!(lines[1].name, None);
        assert!(parse("GET http://a/ name=").unwrap_err().1.contains("name=NAME"));
    }
}
