//! Per-CPU heatmaps: one small PNG per run and per kind of CPU time (user, system, softirq),
//! a pixel per CPU and sample interval, scaled up in the page without smoothing. An image keeps
//! the report small at any size (a 64-CPU host over a 100-run sweep stays well under a
//! megabyte of heatmaps), where an SVG rectangle per cell would not.

use base64::Engine as _;

/// The colour of full use for each kind, fading to white at 0.
pub const KINDS: [(&str, [u8; 3]); 3] =
    [("user", [31, 119, 180]), ("system", [255, 127, 14]), ("softirq", [214, 39, 40])];

/// `shares[interval][cpu]` (0..1) as a PNG, rows = CPUs, columns = intervals, as a data URI.
pub fn data_uri(shares: &[Vec<f64>], cpus: usize, full: [u8; 3]) -> Option<String> {
    let cols = shares.len();
    if cols == 0 || cpus == 0 {
        return None;
    }
    let mut pixels = Vec::with_capacity(cols * cpus * 3);
    for cpu in 0..cpus {
        for interval in shares {
            let v = interval.get(cpu).copied().unwrap_or(0.0).clamp(0.0, 1.0);
            for c in full {
                let white = 255.0;
                pixels.push((white + (f64::from(c) - white) * v).round() as u8);
            }
        }
    }
    let mut png = Vec::new();
    {
        let mut enc =
            png::Encoder::new(&mut png, u32::try_from(cols).ok()?, u32::try_from(cpus).ok()?);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().ok()?;
        w.write_image_data(&pixels).ok()?;
    }
    Some(format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly")]
    use super::*;

    #[test]
    fn a_cpu_at_full_use_is_the_full_colour_and_an_idle_one_white() {
        let uri = data_uri(&[vec![1.0, 0.0], vec![0.5, 0.0]], 2, [214, 39, 40]).unwrap();
        let b64 = uri.strip_prefix("data:image/png;base64,").unwrap();
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (2, 2));
        assert_eq!(&buf[0..3], &[214, 39, 40], "CPU 0, interval 1: full");
        assert_eq!(&buf[3..6], &[235, 147, 148], "CPU 0, interval 2: half");
        assert_eq!(&buf[6..9], &[255, 255, 255], "CPU 1: idle");
        assert!(data_uri(&[], 2, [0, 0, 0]).is_none());
    }
}
