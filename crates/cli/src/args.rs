//! Flag definitions. Only parsing lives here; values go into the libraries' option structs.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "qpslab",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("QPSLAB_GIT_COMMIT"), ")"),
    about = "Measure how many HTTP requests per second a Linux host can serve, and why not more"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// HTTP/1.1 load generator: closed-loop keep-alive load against one URL, exact accounting
    Load(LoadArgs),
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Target URL (http:// only), e.g. http://127.0.0.1:8080/
    #[arg(value_name = "URL", required = true)]
    pub url: String,

    /// Load threads, one event loop each [default: online CPUs, at most -c]
    #[arg(short, long, value_name = "N")]
    pub threads: Option<usize>,

    /// Total keep-alive connections, spread over the threads
    #[arg(short, long, value_name = "N", default_value_t = qpslab_load::config::DEFAULT_CONNECTIONS)]
    pub connections: usize,

    /// Run length after warm-up, e.g. 10s, 2m [default: 10s unless -n is given]
    #[arg(short, long, value_name = "DUR", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Send exactly N requests (after warm-up), then stop when they are answered
    #[arg(short = 'n', long, value_name = "N")]
    pub requests: Option<u64>,

    /// Extra request header 'Name: value' (repeatable); replaces a default of the same name
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,

    /// Request method
    #[arg(short, long, value_name = "METHOD", default_value = "GET")]
    pub method: String,

    /// Request body: a literal string, or @FILE to read it from a file
    #[arg(long, value_name = "STRING|@FILE")]
    pub body: Option<String>,

    /// Per-request timeout; an unanswered request counts as a timeout when it expires
    #[arg(long, value_name = "DUR", default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Warm-up before measuring; its requests are excluded from every figure
    #[arg(long, value_name = "DUR", default_value = "0s", value_parser = parse_duration_or_zero)]
    pub warmup: Duration,

    /// Pin load thread i to the i-th CPU of this list (e.g. 2-3 or 1,3,5)
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,

    /// Print one JSON object (the documented contract) instead of the text summary
    #[arg(long)]
    pub json: bool,

    /// Write the latency histogram to FILE as HdrHistogram V2 (deflate, base64)
    #[arg(long, value_name = "FILE")]
    pub hdr_out: Option<std::path::PathBuf>,

    /// Highest tolerated share of failed requests and bad statuses before exit code 1
    #[arg(long, value_name = "R", default_value_t = 0.0)]
    pub max_error_rate: f64,

    /// Status codes >= 400 that count as success, e.g. 404,500-599
    #[arg(long, value_name = "LIST")]
    pub accept_status: Option<String>,
}

/// `10s`, `2m`, `1h30m`, `500ms`; a bare number means seconds. Zero is rejected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration_or_zero(s)?;
    if d.is_zero() {
        return Err("must be greater than zero, e.g. 10s".into());
    }
    Ok(d)
}

fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}); write e.g. 10s, 2m or 500ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        assert_eq!(parse_duration_or_zero("0"), Ok(Duration::ZERO));
    }
}
