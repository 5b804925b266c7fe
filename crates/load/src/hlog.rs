//! Histograms that leave the process: HdrHistogram interval logs (`--log`, the `.hlog` text
//! format of HdrHistogram's HistogramLogWriter: a header, then one line per interval with its
//! start, length, max and the V2-compressed, base64 histogram) and single encoded histograms
//! (`--hdr-out`); reading either back and merging any number of them exactly (`qpslab merge`).
//!
//! Values are microseconds. Does not measure or decide intervals: the engine does.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::Serialize;
use thiserror::Error;

use crate::report::{encode_histogram, fmt_us, Latency};
use crate::stats::new_histogram;

/// Writes an interval log as intervals arrive.
pub struct HlogWriter {
    out: BufWriter<File>,
    line: Vec<u8>,
    serializer: V2DeflateSerializer,
}

impl std::fmt::Debug for HlogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HlogWriter").finish_non_exhaustive()
    }
}

impl HlogWriter {
    /// Creates (truncates) `path`; the header follows with [`HlogWriter::begin`], once the
    /// start of measurement is known.
    pub fn create(path: &Path) -> io::Result<Self> {
        let out = BufWriter::new(File::create(path)?);
        Ok(Self { out, line: Vec::new(), serializer: V2DeflateSerializer::new() })
    }

    /// Writes the header; `base` is the start of measurement, which interval start times are
    /// relative to.
    pub fn begin(&mut self, base: SystemTime) -> io::Result<()> {
        let mut head = Vec::new();
        let mut serializer = V2DeflateSerializer::new();
        IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "qpslab {}: corrected latency in microseconds, one histogram per interval",
                env!("CARGO_PKG_VERSION")
            ))
            .with_start_time(base)
            .with_base_time(base)
            .begin_log_with(&mut head, &mut serializer)?;
        self.out.write_all(&head)?;
        writeln!(
            self.out,
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        )
    }

    /// Appends one interval: `start` after the base time, lasting `length`.
    pub fn write(
        &mut self,
        h: &Histogram<u64>,
        start: Duration,
        length: Duration,
    ) -> io::Result<()> {
        self.line.clear();
        let mut w =
            IntervalLogWriterBuilder::new().begin_log_with(&mut self.line, &mut self.serializer)?;
        w.write_histogram(h, start, length, None).map_err(|e| io::Error::other(e.to_string()))?;
        self.out.write_all(&self.line)
    }

    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}

/// Why a file could not be merged.
#[derive(Debug, Error)]
pub enum MergeError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
}

/// The histograms in one file.
#[derive(Debug)]
pub struct FileHistograms {
    pub path: PathBuf,
    /// "hlog" (interval log) or "hdr" (one encoded histogram, as `--hdr-out` writes).
    pub format: &'static str,
    /// Interval start offsets and lengths (empty for an `hdr` file).
    pub intervals: Vec<(Duration, Duration)>,
    /// Sum of the file's histograms.
    pub total: Histogram<u64>,
}

/// Reads an interval log or an encoded histogram file.
pub fn read_file(path: &Path) -> Result<FileHistograms, MergeError> {
    let err = |message: String| MergeError::File { path: path.to_path_buf(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let mut total = new_histogram();
    let trimmed = text.trim();
    let is_single = !trimmed.is_empty()
        && !trimmed.contains('\n')
        && !trimmed.starts_with('#')
        && !trimmed.contains(',');
    if is_single {
        let h = decode(trimmed).map_err(|m| err(format!("not an encoded histogram: {m}")))?;
        add(&mut total, &h).map_err(err)?;
        return Ok(FileHistograms {
            path: path.to_path_buf(),
            format: "hdr",
            intervals: Vec::new(),
            total,
        });
    }
    let mut intervals = Vec::new();
    for entry in IntervalLogIterator::new(text.as_bytes()) {
        match entry {
            Ok(LogEntry::Interval(i)) => {
                let h = decode(i.encoded_histogram())
                    .map_err(|m| err(format!("interval at {:?}: {m}", i.start_timestamp())))?;
                add(&mut total, &h).map_err(err)?;
                intervals.push((i.start_timestamp(), i.duration()));
            }
            Ok(_) => {}
            Err(e) => {
                let at = match e {
                    hdrhistogram::serialization::interval_log::LogIteratorError::ParseError {
                        offset,
                    } => offset,
                };
                return Err(err(format!(
                    "not an interval log (--log) or histogram file (--hdr-out): unreadable at \
                     byte {at}"
                )));
            }
        }
    }
    if intervals.is_empty() {
        return Err(err(
            "holds no histogram; give an interval log (--log) or a histogram file (--hdr-out)"
                .into(),
        ));
    }
    Ok(FileHistograms { path: path.to_path_buf(), format: "hlog", intervals, total })
}

/// Reads every file and adds all their histograms into one; exact, since every histogram keeps
/// its counts per bucket.
pub fn merge(paths: &[PathBuf]) -> Result<(Vec<FileHistograms>, Histogram<u64>), MergeError> {
    let mut total = new_histogram();
    let mut files = Vec::new();
    for p in paths {
        let f = read_file(p)?;
        add(&mut total, &f.total)
            .map_err(|message| MergeError::File { path: p.clone(), message })?;
        files.push(f);
    }
    Ok((files, total))
}

/// Decodes every encoded histogram (as a report's `latency_hdr`) and adds them into one.
pub fn merge_encoded<'a>(
    encoded: impl IntoIterator<Item = &'a str>,
) -> Result<Histogram<u64>, String> {
    let mut total = new_histogram();
    for b64 in encoded {
        add(&mut total, &decode(b64)?)?;
    }
    Ok(total)
}

/// One merged file, as `qpslab merge` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct FileRow {
    pub path: String,
    pub format: &'static str,
    pub intervals: usize,
    /// Seconds from the log's base time to the end of its last interval.
    pub span_s: f64,
    pub count: u64,
}

/// What `qpslab merge` prints.
#[derive(Debug, Clone, Serialize)]
pub struct MergeReport {
    pub files: Vec<FileRow>,
    pub count: u64,
    pub latency_us: Latency,
    pub latency_hdr: String,
}

impl MergeReport {
    pub fn new(files: &[FileHistograms], total: &Histogram<u64>) -> Self {
        Self {
            files: files
                .iter()
                .map(|f| FileRow {
                    path: f.path.display().to_string(),
                    format: f.format,
                    intervals: f.intervals.len(),
                    span_s: f
                        .intervals
                        .iter()
                        .map(|(s, d)| (*s + *d).as_secs_f64())
                        .fold(0.0, f64::max),
                    count: f.total.len(),
                })
                .collect(),
            count: total.len(),
            latency_us: Latency::from_histogram(total),
            latency_hdr: encode_histogram(total),
        }
    }

    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "Merged {} files: {} samples", self.files.len(), self.count);
        for f in &self.files {
            let what = match f.format {
                "hlog" => format!("interval log, {} intervals over {:.2}s", f.intervals, f.span_s),
                _ => "histogram".to_string(),
            };
            let _ = writeln!(s, "  {:>10} samples  {} ({what})", f.count, f.path);
        }
        let l = &self.latency_us;
        let _ = writeln!(
            s,
            "  Latency  avg {}  stdev {}  min {}",
            fmt_us(l.mean),
            fmt_us(l.stdev),
            fmt_us(l.min as f64)
        );
        l.write_distribution(&mut s);
        s
    }
}

/// Decodes a base64, V2 (optionally deflated) histogram.
pub fn decode(b64: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("bad base64 ({e})"))?;
    Deserializer::new().deserialize(&mut bytes.as_slice()).map_err(|e| format!("{e:?}"))
}

/// Adds `h` into `total` (which has the engine's fixed bounds); values above them saturate at
/// the highest trackable value rather than failing.
pub(crate) fn add(total: &mut Histogram<u64>, h: &Histogram<u64>) -> Result<(), String> {
    if h.max() <= total.high() {
        return total.add(h).map_err(|e| format!("cannot add histogram: {e:?}"));
    }
    for v in h.iter_recorded() {
        total
            .record_n(v.value_iterated_to().min(total.high()), v.count_at_value())
            .map_err(|e| format!("cannot add histogram: {e:?}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_reads_back_interval_by_interval_and_sums_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.hlog");
        let mut w = HlogWriter::create(&path).unwrap();
        w.begin(SystemTime::now()).unwrap();
        let mut whole = new_histogram();
        for i in 0..3u64 {
            let mut h = new_histogram();
            for v in 0..1000 {
                h.record(1 + v * (i + 1)).unwrap();
            }
            whole.add(&h).unwrap();
            w.write(&h, Duration::from_secs(i), Duration::from_secs(1)).unwrap();
        }
        w.finish().unwrap();
        let f = read_file(&path).unwrap();
        assert_eq!(f.format, "hlog");
        assert_eq!(f.intervals.len(), 3);
        assert_eq!(f.intervals[2], (Duration::from_secs(2), Duration::from_secs(1)));
        assert_eq!(f.total, whole);

        let hdr = dir.path().join("x.hdr");
        std::fs::write(&hdr, encode_histogram(&whole) + "\n").unwrap();
        let (files, total) = merge(&[path.clone(), hdr]).unwrap();
        assert_eq!(files[1].format, "hdr");
        assert_eq!(total.len(), 2 * whole.len());
        assert_eq!(total.value_at_quantile(0.99), whole.value_at_quantile(0.99));
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk");
        std::fs::write(&path, "hello\nworld\n").unwrap();
        let e = read_file(&path).unwrap_err().to_string();
        assert!(e.contains("junk"), "{e}");
        std::fs::write(&path, "!!!notbase64").unwrap();
        assert!(read_file(&path).unwrap_err().to_string().contains("not an encoded histogram"));
        assert!(read_file(&dir.path().join("missing")).is_err());
    }
}
