//! A request's fields checked one by one as they decode, by the rules HTTP/2 and HTTP/3 share
//! (RFC 9113 section 8.2 and 8.3, RFC 9114 section 4.3): pseudo-fields, names, values.

/// What a request's header block held, checked field by field as it decodes (RFC 9113 8.2 and
/// 8.3): a request breaking any rule is malformed, a stream error of type PROTOCOL_ERROR.
#[derive(Debug, Default)]
pub(super) struct FieldCheck {
    /// Pseudo-header fields seen (bits: method, scheme, path, authority).
    pseudo: u8,
    regular_seen: bool,
    pub(super) malformed: bool,
    pub(super) has_host: bool,
}

impl FieldCheck {
    const METHOD: u8 = 1;
    const SCHEME: u8 = 2;
    const PATH: u8 = 4;
    const AUTHORITY: u8 = 8;

    /// Checks one field; `trailers`: no pseudo-header field is allowed.
    pub(super) fn field(&mut self, name: &[u8], value: &[u8], trailers: bool) {
        let bad_value = value.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n'))
            || value.first().is_some_and(|&b| b == b' ' || b == b'\t')
            || value.last().is_some_and(|&b| b == b' ' || b == b'\t');
        if let Some(pseudo) = name.strip_prefix(b":") {
            let bit = match pseudo {
                b"method" => Self::METHOD,
                b"scheme" => Self::SCHEME,
                b"path" => Self::PATH,
                b"authority" => Self::AUTHORITY,
                _ => 0,
            };
            // Unknown or response pseudo-fields, repeats, after a regular field, in trailers.
            if bit == 0 || self.pseudo & bit != 0 || self.regular_seen || trailers {
                self.malformed = true;
            }
            self.pseudo |= bit;
            self.malformed |= bad_value || (bit == Self::PATH && value.is_empty());
            return;
        }
        self.regular_seen = true;
        // Lower-case tokens only (RFC 9110 5.1, RFC 9113 8.2.1).
        let bad_name = name.is_empty()
            || name.iter().any(|&b| b.is_ascii_uppercase() || !qpslab_http::is_tchar(b));
        // Connection-specific fields have no place in HTTP/2 (8.2.2); TE only as "trailers".
        let connection_specific = matches!(
            name,
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade"
        ) || (name == b"te" && value != b"trailers");
        self.has_host |= name == b"host";
        self.malformed |= bad_name || bad_value || connection_specific;
    }

    /// A request head needs :method, :scheme and :path (no CONNECT here).
    pub(super) fn complete(&self) -> bool {
        self.pseudo & (Self::METHOD | Self::SCHEME | Self::PATH)
            == Self::METHOD | Self::SCHEME | Self::PATH
    }
}
