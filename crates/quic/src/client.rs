//! A QUIC client connection of qpslab's own (RFC 9000, RFC 9001, RFC 9002):
//! the Initial, Handshake and 1-RTT packet number spaces with their keys, rustls's handshake
//! carried in CRYPTO frames each way, every packet received acknowledged in its space, and
//! the handshake confirmed by the server's HANDSHAKE_DONE. Sans-I/O, as quinn-proto is: the
//! caller hands datagrams in ([`Client::recv`]) and takes datagrams to send
//! ([`Client::poll_transmit`]).
//!
//! Streams and their flow control are [`crate::streams`]'s, loss detection and congestion
//! control [`crate::recovery`]'s (the caller fires [`Client::handle_timeout`] at
//! [`Client::timeout`]), as is the idle timeout. 1-RTT key updates the server starts are
//! followed; [`Client::close`] sends a CONNECTION_CLOSE. A server's Retry is followed once (its
//! integrity tag checked, its token sent in every later Initial, its connection ID checked in
//! the transport parameters); a Version Negotiation without version 1 ends the connection
//! with the versions the server offers. A resumed session whose ticket allows early data
//! sends its streams in 0-RTT packets until the 1-RTT keys come, under the limits the server
//! gave the session before (RFC 9000 section 7.4.1); when the server refuses them, every
//! stream is forgotten, as quinn-proto does, for the caller to open again. Not yet: delayed
//! acknowledgements, connection migration.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::quic::{DirectionalKeys, KeyChange, Keys, Version};

use crate::frame::{self, Frame};
use crate::packet::{self, Head, Kind, Long};
use crate::recovery::{Congestion, Flight, Pacer, Retx, Rtt, Sent};
use crate::streams::{PeerLimits, Streams};

/// Handshake bytes held out of order in a space at most (a certificate chain is a few KB).
const CRYPTO_HELD: u64 = 64 * 1024;

/// The datagram size this client sends (an Initial's datagram must be at least 1,200).
pub const MTU: usize = 1200;
/// A 1-RTT packet this close to filling its datagram is padded to fill it.
const FULL_SLACK: usize = 48;

/// Why the connection failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// rustls refused the handshake (with the TLS alert it would send, if any).
    Tls(String),
    /// The server broke the protocol (a frame that does not parse, one where it may not be).
    Protocol(String),
    /// The server closed the connection: its error code (the application's or the
    /// transport's) and reason.
    Closed { app: bool, code: u64, reason: String },
    /// Nothing came from the server for the idle timeout.
    TimedOut,
    /// This side closed it.
    Local,
    /// The server does not speak QUIC version 1: the versions its Version Negotiation packet
    /// offers.
    Version(Vec<u32>),
}

/// One packet number space: its keys, the numbers sent and received, and its handshake
/// bytes each way.
#[derive(Default)]
struct Space {
    /// Keys to send and to read; None before they exist or once they are dropped.
    keys: Option<(DirectionalKeys, DirectionalKeys)>,
    next_pn: u64,
    /// The largest packet number received, and the ranges received (inclusive, largest
    /// first) that the next ACK reports.
    largest: Option<u64>,
    received: Vec<(u64, u64)>,
    /// An ack-eliciting packet came since the last ACK sent; how many, when the first of
    /// them came (1-RTT: the ACK may wait for a second, up to [`ACK_DELAY`]) and whether
    /// one came out of order (then it goes at once); when the largest came.
    ack_owed: bool,
    unacked: u32,
    ack_at: Option<Instant>,
    ack_now: bool,
    largest_at: Option<Instant>,
    /// Every handshake byte written in this space (kept: a lost one goes again), the next
    /// offset not yet sent, and ranges lost, to send again.
    crypto_out: Vec<u8>,
    crypto_sent: u64,
    crypto_lost: VecDeque<(u64, u64)>,
    /// Packets in flight, for loss detection; a probe owed (a PING when nothing is left to
    /// send again).
    flight: Flight,
    probe: bool,
    /// Handshake bytes received past the next expected offset, held until it comes.
    crypto_in: Vec<(u64, Vec<u8>)>,
    crypto_read: u64,
}

impl Space {
    /// Packet `pn` came at `now`. Its acknowledgement is owed at once unless the space
    /// `delays` it (1-RTT, RFC 9000 section 13.2.1): there an ACK goes with whatever this
    /// side sends next, and alone only for every second ack-eliciting packet, for one out of
    /// order, or [`ACK_DELAY`] after the first it owes.
    fn received(&mut self, pn: u64, eliciting: bool, delays: bool, now: Instant) {
        let in_order = self.largest.is_none_or(|l| pn == l + 1);
        if self.largest.is_none_or(|l| pn > l) {
            self.largest = Some(pn);
            self.largest_at = Some(now);
        }
        if eliciting {
            self.ack_owed = true;
            self.unacked += 1;
            self.ack_now |= !delays || !in_order || self.unacked >= 2;
            self.ack_at.get_or_insert(now + ACK_DELAY);
        }
        add_range(&mut self.received, pn);
    }

    /// An ACK owed must go now, alone if need be.
    fn ack_due(&self, now: Instant) -> bool {
        self.ack_owed && (self.ack_now || self.ack_at.is_some_and(|t| t <= now))
    }

    /// An ACK went: nothing is owed.
    fn acked(&mut self) {
        self.ack_owed = false;
        self.unacked = 0;
        self.ack_at = None;
        self.ack_now = false;
    }
}

/// Adds `pn` to inclusive ranges kept largest first, merging neighbours.
fn add_range(ranges: &mut Vec<(u64, u64)>, pn: u64) {
    for i in 0..ranges.len() {
        let (lo, hi) = ranges[i];
        if pn > hi + 1 {
            ranges.insert(i, (pn, pn));
            break;
        }
        if pn == hi + 1 {
            ranges[i].1 = pn;
            break;
        }
        if pn >= lo {
            return;
        }
        if pn + 1 == lo {
            ranges[i].0 = pn;
            // It may now touch the range below.
            if ranges.get(i + 1).is_some_and(|&(_, below)| below + 1 == pn) {
                ranges[i].0 = ranges[i + 1].0;
                ranges.remove(i + 1);
            }
            return;
        }
    }
    if ranges.last().is_none_or(|&(lo, _)| pn + 1 < lo) {
        ranges.push((pn, pn));
    }
    // Old history goes: 32 ranges are plenty for an ACK.
    ranges.truncate(32);
}

const INITIAL: usize = 0;
const HANDSHAKE: usize = 1;
const DATA: usize = 2;

/// A client connection's state.
pub struct Client {
    tls: rustls::quic::ClientConnection,
    spaces: [Space; 3],
    /// The space rustls's next handshake bytes go to.
    write_space: usize,
    /// Where packets go (the server's chosen connection ID once it answered), and this
    /// client's own.
    dcid: Vec<u8>,
    scid: Vec<u8>,
    /// The server's first Initial was read (its connection ID taken).
    answered: bool,
    /// The server's HANDSHAKE_DONE came.
    confirmed: bool,
    failed: Option<Error>,
    /// The connection ID this client chose first for the server (its transport parameters
    /// must name it).
    original_dcid: Vec<u8>,
    /// The connection ID of the server's Retry, once one was followed (its transport
    /// parameters must name it too), and the token every Initial carries from then on.
    retry_scid: Option<Vec<u8>>,
    token: Vec<u8>,
    pub streams: Streams,
    pub counts: Counts,
    /// 1-RTT key updates (RFC 9001 section 6), once the 1-RTT keys are there.
    key_update: Option<KeyUpdate>,
    /// The 0-RTT keys, from a resumed session that allows early data until the 1-RTT keys
    /// come; whether early data was sent for.
    early: Option<DirectionalKeys>,
    early_tried: bool,
    /// Loss recovery: the round trip, the congestion window, probe timeouts in a row.
    pub rtt: Rtt,
    pub cc: Congestion,
    pto_count: u32,
    /// New data's pace, and when it lets the next datagram go (a timer while data waits).
    pacer: Pacer,
    pace_at: Option<Instant>,
    /// When the connection goes idle (RFC 9000 section 10.1): the timeout, from the last
    /// packet received or the first ack-eliciting one sent after it.
    idle_timeout: Duration,
    idle_at: Option<Instant>,
    /// A CONNECTION_CLOSE to send (once), in the space its keys allow.
    close: Option<Vec<u8>>,
    /// Where [`Client::poll_transmit`] writes a packet's frames.
    frames: Vec<u8>,
    /// The largest datagram the path is known to carry (from [`MTU`]), and the search for a
    /// larger one (RFC 8899, once the handshake is confirmed).
    mtu: usize,
    mtu_search: MtuSearch,
}

/// Path MTU discovery (DPLPMTUD, RFC 8899): padded PINGs of a size between what the path is
/// known to carry and the ceiling, one at a time; an acknowledged one raises the floor (and
/// the datagram size), a lost one lowers the ceiling. The ceiling first (the common Ethernet
/// path), then halving the gap until it is under [`MTU_STEP`].
#[derive(Debug, Clone, Copy)]
struct MtuSearch {
    floor: usize,
    ceiling: usize,
    /// A probe of this size is in flight; one was sent before.
    probing: Option<usize>,
    tried: bool,
}

/// The largest datagram probed for: 1,500 bytes of Ethernet less IPv6 and UDP headers.
pub const MTU_CEILING: usize = 1452;
/// The search ends when the gap between what worked and what did not is this small.
const MTU_STEP: usize = 20;
/// Datagrams larger than [`MTU`] lost in a row (none of them acknowledged) that say the path
/// no longer carries them: the size goes back to [`MTU`] and the search starts again below
/// the size that failed.
const BLACK_HOLE_RUN: u32 = 3;

impl MtuSearch {
    /// The next size to probe, if the search goes on.
    fn next(&self) -> Option<usize> {
        if self.probing.is_some() || self.ceiling < self.floor + MTU_STEP {
            return None;
        }
        Some(if self.tried { (self.floor + self.ceiling).div_ceil(2) } else { self.ceiling })
    }
}

/// The 1-RTT key phase in use, the packet keys of the next and the secrets after those.
struct KeyUpdate {
    phase: bool,
    next: rustls::quic::PacketKeySet,
    secrets: rustls::quic::Secrets,
}

/// What the connection sent and received, in packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub packets_in: u64,
    /// Packets that did not open (no keys for their space, or the AEAD refused them).
    pub undecryptable: u64,
    pub packets_out: u64,
    pub acks_out: u64,
    /// ACK frames received.
    pub acks_in: u64,
    /// 1-RTT key updates the server started, followed.
    pub key_updates: u64,
    /// Probe timeouts that fired.
    pub probes: u64,
    /// A Retry from the server, followed (0 or 1).
    pub retries: u64,
    /// Path MTU probes sent, and times the size found stopped getting through.
    pub mtu_probes: u64,
    pub black_holes: u64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("scid", &self.scid)
            .field("dcid", &self.dcid)
            .field("confirmed", &self.confirmed)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// The Initial keys of a connection whose client chose `dcid` first, this client's side.
fn initial_keys(dcid: &[u8]) -> Option<Keys> {
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let quic = suite.tls13()?.quic_suite()?;
    Some(quic.keys(dcid, rustls::Side::Client, Version::V1))
}

fn split(keys: Keys) -> (DirectionalKeys, DirectionalKeys) {
    (keys.local, keys.remote)
}

impl Client {
    /// A connection to `name` with `config` (TLS 1.3, its ALPN set); `dcid` (8 to 20 random
    /// bytes) is the server's connection ID until it chooses one, `scid` this client's own.
    /// Its first flight waits in [`Client::poll_transmit`].
    pub fn new(
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        dcid: &[u8],
        scid: &[u8],
    ) -> Result<Client, Error> {
        let tls = rustls::quic::ClientConnection::new(config, Version::V1, name, params(scid))
            .map_err(|e| Error::Tls(e.to_string()))?;
        let keys = initial_keys(dcid).ok_or_else(|| Error::Tls("no Initial keys".into()))?;
        let mut c = Client {
            tls,
            spaces: Default::default(),
            write_space: INITIAL,
            dcid: dcid.to_vec(),
            scid: scid.to_vec(),
            answered: false,
            confirmed: false,
            failed: None,
            original_dcid: dcid.to_vec(),
            retry_scid: None,
            token: Vec::new(),
            streams: Streams::new(),
            counts: Counts::default(),
            key_update: None,
            early: None,
            early_tried: false,
            rtt: Rtt::default(),
            cc: Congestion::default(),
            pacer: Pacer::default(),
            pace_at: None,
            pto_count: 0,
            idle_timeout: IDLE_TIMEOUT,
            idle_at: None,
            close: None,
            frames: Vec::with_capacity(MTU),
            mtu: MTU,
            mtu_search: MtuSearch { floor: MTU, ceiling: MTU_CEILING, probing: None, tried: false },
        };
        c.spaces[INITIAL].keys = Some(split(keys));
        c.write_handshake();
        // A resumed session that allows early data: streams may open now, under the limits
        // the server gave it (the transport parameters rustls kept with the ticket).
        if let Some(keys) = c.tls.zero_rtt_keys() {
            let remembered = c.tls.quic_transport_parameters().and_then(peer_params);
            if let Some((limits, _)) = remembered {
                c.streams.peer = limits;
                c.early = Some(keys);
                c.early_tried = true;
            }
        }
        Ok(c)
    }

    /// Streams went in 0-RTT packets (the resumed session allowed early data).
    pub fn tried_early(&self) -> bool {
        self.early_tried
    }

    /// The server took the early data: it tried and was not refused, once the handshake is
    /// done.
    pub fn early_accepted(&self) -> bool {
        self.early_tried && self.is_established() && self.tls.is_early_data_accepted()
    }

    /// The handshake is done on this side (its Finished written, 1-RTT keys there): requests
    /// may go.
    pub fn is_established(&self) -> bool {
        self.spaces[DATA].keys.is_some() && !self.tls.is_handshaking()
    }

    /// A CONNECTION_CLOSE waits to be sent.
    pub fn close_pending(&self) -> bool {
        self.close.is_some()
    }

    /// The handshake is confirmed (the server's HANDSHAKE_DONE came).
    pub fn is_confirmed(&self) -> bool {
        self.confirmed
    }

    /// What ended the connection, if something did.
    pub fn failure(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    /// Closes the connection: a CONNECTION_CLOSE with `code` and `reason` goes at the next
    /// [`Client::poll_transmit`], the application's (`app`) once 1-RTT keys are there, else
    /// the transport's APPLICATION_ERROR (RFC 9000 section 10.2.3). Nothing is sent after it,
    /// and nothing received is read.
    pub fn close(&mut self, app: bool, code: u64, reason: &[u8]) {
        if self.close.is_some() || matches!(self.failed, Some(Error::Local)) {
            return;
        }
        let mut f = Vec::new();
        let one_rtt = self.spaces[DATA].keys.is_some();
        match (app, one_rtt) {
            (true, false) => frame::put_close(&mut f, false, 0x0c, b""),
            _ => frame::put_close(&mut f, app, code, reason),
        }
        self.close = Some(f);
        // A connection that failed already tells the server nothing more.
        if self.failed.is_some() {
            self.close = None;
        }
        self.failed = Some(Error::Local);
    }

    /// The TLS session (the ALPN agreed, the server's transport parameters).
    pub fn tls(&self) -> &rustls::quic::ClientConnection {
        &self.tls
    }

    /// Takes what rustls has to send, each batch into the space it belongs to, and the keys
    /// it makes ready.
    fn write_handshake(&mut self) {
        loop {
            let mut out = Vec::new();
            let change = self.tls.write_hs(&mut out);
            self.spaces[self.write_space].crypto_out.extend_from_slice(&out);
            match change {
                Some(KeyChange::Handshake { keys }) => {
                    self.spaces[HANDSHAKE].keys = Some(split(keys));
                    self.write_space = HANDSHAKE;
                }
                Some(KeyChange::OneRtt { keys, mut next }) => {
                    self.spaces[DATA].keys = Some(split(keys));
                    let next_keys = next.next_packet_keys();
                    self.key_update =
                        Some(KeyUpdate { phase: false, next: next_keys, secrets: next });
                    self.write_space = DATA;
                    if self.early.take().is_some() && !self.tls.is_early_data_accepted() {
                        // Refused: the server read none of the 0-RTT packets, so what they
                        // carried is not in flight, and the streams start over.
                        self.spaces[DATA].flight.discard(&mut self.cc);
                        self.streams = Streams::new();
                    }
                    self.take_params();
                }
                None => break,
            }
        }
    }

    /// The server updated the 1-RTT keys (a packet in the other key phase opened with the
    /// next keys): this side's packets take them too, and the keys after them are made ready.
    /// Packets of the old phase that arrive later are dropped (not yet kept for reordering).
    fn update_keys(&mut self) {
        let (Some(u), Some((local, remote))) = (&mut self.key_update, &mut self.spaces[DATA].keys)
        else {
            return;
        };
        let next = std::mem::replace(&mut u.next, u.secrets.next_packet_keys());
        local.packet = next.local;
        remote.packet = next.remote;
        u.phase = !u.phase;
        self.counts.key_updates += 1;
    }

    /// The server's transport parameters, once its handshake is read: its limits for the
    /// streams, and the connection IDs it must name (RFC 9000 section 7.3).
    fn take_params(&mut self) {
        let Some(b) = self.tls.quic_transport_parameters() else {
            self.failed = Some(Error::Protocol("no transport parameters from the server".into()));
            return;
        };
        match peer_params(b) {
            Some((limits, ids))
                if ids.odcid == self.original_dcid
                    && ids.iscid == self.dcid
                    && ids.retry_scid == self.retry_scid.as_deref() =>
            {
                if limits.idle_ms > 0 {
                    let peer = Duration::from_millis(limits.idle_ms);
                    self.idle_timeout = self.idle_timeout.min(peer);
                }
                if limits.max_udp_payload > 0 {
                    let most = usize::try_from(limits.max_udp_payload).unwrap_or(usize::MAX);
                    self.mtu_search.ceiling = self.mtu_search.ceiling.min(most);
                }
                self.streams.peer = limits;
            }
            Some(_) => {
                self.failed = Some(Error::Protocol(
                    "the server's transport parameters name other connection IDs \
                     (TRANSPORT_PARAMETER_ERROR)"
                        .into(),
                ));
            }
            None => {
                self.failed = Some(Error::Protocol(
                    "the server's transport parameters do not parse (TRANSPORT_PARAMETER_ERROR)"
                        .into(),
                ));
            }
        }
    }

    /// Reads a datagram from the server (changed in place: its packets are decrypted there).
    pub fn recv(&mut self, datagram: &mut [u8], now: Instant) {
        let mut at = 0;
        while at < datagram.len() && self.failed.is_none() {
            let d = &mut datagram[at..];
            let Ok(h) = packet::parse(d, self.scid.len()) else { return };
            let (kind, span, scid) = (h.kind, h.span(), h.scid.to_vec());
            at += span.end;
            let space = match kind {
                Kind::Initial => INITIAL,
                Kind::Handshake => HANDSHAKE,
                Kind::OneRtt => DATA,
                // Neither has a length: each is the whole datagram.
                Kind::Retry => return self.retry(d),
                Kind::VersionNegotiation => return self.version_negotiation(d),
                // 0-RTT is never the server's.
                Kind::ZeroRtt => continue,
            };
            let Some((_, remote)) = &self.spaces[space].keys else { continue };
            let largest = self.spaces[space].largest;
            let update = &self.key_update;
            let opened =
                packet::open_phase(d, span, &*remote.header, largest, |phase| match update {
                    Some(u) if space == DATA && phase != u.phase => Some(&*u.next.remote),
                    _ => Some(&*remote.packet),
                });
            let Ok((pn, phase, payload)) = opened else {
                self.counts.undecryptable += 1;
                continue;
            };
            self.counts.packets_in += 1;
            self.idle_at = Some(now + self.idle_timeout);
            if space == DATA && self.key_update.as_ref().is_some_and(|u| u.phase != phase) {
                self.update_keys();
            }
            if kind == Kind::Initial && !self.answered {
                // The server's choice of connection ID is where packets go from now on.
                self.answered = true;
                self.dcid = scid;
            }
            let eliciting = self.frames(space, payload, now);
            self.spaces[space].received(pn, eliciting, space == DATA, now);
            // Once the client sends in the Handshake space, the Initial keys go (RFC 9001
            // section 4.9.1); done at the next send.
        }
    }

    /// A Retry packet (RFC 9000 section 17.2.5): followed when it is the first thing the
    /// server sent, is to this client, carries a token and its integrity tag checks. The
    /// Initial packets go again to the connection ID it names, under the keys that ID makes,
    /// with its token; packet numbers go on, loss recovery starts over (RFC 9002 section
    /// 6.3).
    fn retry(&mut self, d: &[u8]) {
        if self.answered || self.retry_scid.is_some() {
            return;
        }
        let Ok(h) = packet::parse(d, self.scid.len()) else { return };
        if h.dcid != self.scid
            || h.token.is_empty()
            || !packet::retry_is_valid(&self.original_dcid, d)
        {
            return;
        }
        let Some(keys) = initial_keys(h.scid) else { return };
        self.dcid = h.scid.to_vec();
        self.retry_scid = Some(self.dcid.clone());
        self.token = h.token.to_vec();
        self.counts.retries += 1;
        let s = &mut self.spaces[INITIAL];
        s.keys = Some(split(keys));
        s.flight.discard(&mut self.cc);
        s.crypto_lost.clear();
        s.crypto_sent = 0;
        self.pto_count = 0;
        // The server dropped the 0-RTT packets sent before (they name the old connection ID
        // and keys): their streams' bytes go again at once, in 0-RTT to the new ID.
        let mut again = Vec::new();
        self.spaces[DATA].flight.forget(&mut self.cc, &mut |r| again.push(*r));
        self.resend(DATA, &again);
    }

    /// A Version Negotiation packet (RFC 9000 section 6.2): the connection ends when it is
    /// the first thing the server sent, is to this client and does not offer version 1 (one
    /// that does is forged or stale: dropped).
    fn version_negotiation(&mut self, d: &[u8]) {
        if self.answered || self.retry_scid.is_some() || self.counts.packets_in > 0 {
            return;
        }
        let Ok(h) = packet::parse(d, self.scid.len()) else { return };
        if h.dcid != self.scid || h.scid != self.original_dcid {
            return;
        }
        // After the first byte, the version, and each connection ID with its length.
        let list = &d[7 + h.dcid.len() + h.scid.len()..];
        let offered: Vec<u32> =
            list.chunks_exact(4).map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]])).collect();
        if !offered.contains(&packet::V1) {
            self.failed = Some(Error::Version(offered));
        }
    }

    /// The frames of a packet in `space`; whether any asks for an acknowledgement.
    fn frames(&mut self, space: usize, payload: &[u8], now: Instant) -> bool {
        let mut eliciting = false;
        for f in frame::frames(payload) {
            let f = match f {
                Ok(f) => f,
                Err(e) => {
                    self.failed =
                        Some(Error::Protocol(format!("a malformed frame (type {:#x})", e.0)));
                    return false;
                }
            };
            eliciting |=
                !matches!(f, Frame::Padding | Frame::Ack(_) | Frame::ConnectionClose { .. });
            match f {
                Frame::Crypto { offset, data } => self.crypto(space, offset, data),
                Frame::Ack(a) => {
                    self.counts.acks_in += 1;
                    // The delay counts in units of 2^ack_delay_exponent us (3 unless the
                    // server says otherwise: it does not here).
                    let delay = if space == DATA {
                        Duration::from_micros(a.delay.saturating_mul(8)).min(MAX_ACK_DELAY)
                    } else {
                        Duration::ZERO
                    };
                    self.on_ack(space, a.ranges(), delay, now);
                }
                Frame::HandshakeDone if space == DATA => {
                    self.confirmed = true;
                    // The Handshake keys go once the handshake is confirmed (section 4.9.2).
                    self.drop_space(HANDSHAKE);
                }
                Frame::HandshakeDone => {
                    self.failed = Some(Error::Protocol("HANDSHAKE_DONE before 1-RTT".into()));
                }
                Frame::ConnectionClose { app, code, reason, .. } => {
                    let reason = String::from_utf8_lossy(reason).into_owned();
                    self.failed = Some(Error::Closed { app, code, reason });
                }
                Frame::Stream { .. }
                | Frame::ResetStream { .. }
                | Frame::StopSending { .. }
                | Frame::MaxData(_)
                | Frame::MaxStreamData { .. }
                | Frame::MaxStreams { .. }
                    if space != DATA =>
                {
                    self.failed = Some(Error::Protocol("a stream frame before 1-RTT".into()));
                }
                Frame::Stream { id, offset, data, fin } => {
                    if let Err(b) = self.streams.on_stream(id, offset, data, fin) {
                        self.failed = Some(Error::Protocol(format!("{} (code {:#x})", b.1, b.0)));
                    }
                }
                Frame::ResetStream { id, code, final_size } => {
                    if let Err(b) = self.streams.on_reset(id, code, final_size) {
                        self.failed = Some(Error::Protocol(format!("{} (code {:#x})", b.1, b.0)));
                    }
                }
                Frame::StopSending { id, .. } => self.streams.on_stop(id),
                Frame::MaxData(max) => self.streams.on_max_data(max),
                Frame::MaxStreamData { id, max } => self.streams.on_max_stream_data(id, max),
                Frame::MaxStreams { bidi, max } => self.streams.on_max_streams(bidi, max),
                _ => {}
            }
            if self.failed.is_some() {
                return false;
            }
        }
        eliciting
    }

    /// Handshake bytes at `offset` of `space`'s crypto stream: given to rustls in order.
    fn crypto(&mut self, space: usize, offset: u64, data: &[u8]) {
        let s = &mut self.spaces[space];
        let end = offset + data.len() as u64;
        if end <= s.crypto_read {
            return;
        }
        if offset > s.crypto_read {
            // Held out of order, to a bound (RFC 9000 section 7.5): past it, the server is
            // sending a handshake no client needs, or flooding.
            let held: usize = s.crypto_in.iter().map(|(_, d)| d.len()).sum();
            if end - s.crypto_read > CRYPTO_HELD || held + data.len() > CRYPTO_HELD as usize {
                self.failed = Some(Error::Protocol(
                    "CRYPTO data past the buffer's bound (CRYPTO_BUFFER_EXCEEDED)".into(),
                ));
                return;
            }
            s.crypto_in.push((offset, data.to_vec()));
            return;
        }
        let mut ready = data[(s.crypto_read - offset) as usize..].to_vec();
        s.crypto_read = end;
        // What arrived earlier past the gap, now in order.
        while let Some(i) = s.crypto_in.iter().position(|(o, _)| *o <= s.crypto_read) {
            let (o, d) = s.crypto_in.swap_remove(i);
            let e = o + d.len() as u64;
            if e > s.crypto_read {
                ready.extend_from_slice(&d[(s.crypto_read - o) as usize..]);
                s.crypto_read = e;
            }
        }
        if let Err(e) = self.tls.read_hs(&ready) {
            let alert = self.tls.alert().map(|a| format!(" (alert {a:?})")).unwrap_or_default();
            self.failed = Some(Error::Tls(format!("{e}{alert}")));
            return;
        }
        self.write_handshake();
    }

    /// Writes the next datagram to send into `out` (cleared first): a path MTU probe when one
    /// is due ([`Client::probe_mtu`]), else each space's ACK, its handshake bytes (lost ones
    /// first) and, in 1-RTT, the streams' frames as the congestion window allows; Initial,
    /// Handshake and 1-RTT packets coalesced. False when there is nothing to send.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>, now: Instant) -> bool {
        out.clear();
        self.probe_mtu(out, now) > 0 || self.append_transmit(out, now) > 0
    }

    /// As [`Client::poll_transmit`], the datagram appended to `out` (where others are): its
    /// length, 0 when there is nothing to send.
    pub fn append_transmit(&mut self, out: &mut Vec<u8>, now: Instant) -> usize {
        let start = out.len();
        // A close goes after the handshake bytes still unsent (this side's Finished, when the
        // answer came in the server's first flight and the connection closes at once): the
        // server completes its handshake and can read the close in 1-RTT; without them it
        // drops 1-RTT packets and holds the connection to its idle timeout.
        let close = self.close.take();
        if close.is_none() && self.failed.is_some() {
            return 0;
        }
        let spaces: &[usize] =
            if close.is_some() { &[HANDSHAKE] } else { &[INITIAL, HANDSHAKE, DATA] };
        self.idle_at.get_or_insert(now + self.idle_timeout);
        let mut initial_sent = false;
        // With 0-RTT keys, a 0-RTT packet follows an Initial in its datagram and takes the
        // padding that makes it 1,200 bytes (RFC 9000 section 14.1), as the ClientHello and
        // the first requests go together; owed once such an Initial is written.
        let early_follows = self.early.is_some();
        let mut pad_owed = false;
        // The frames of each packet are written in one buffer kept across calls.
        let mut frames = std::mem::take(&mut self.frames);
        for &space in spaces {
            let s = &mut self.spaces[space];
            // Before the 1-RTT keys, a resumed session's streams go in 0-RTT packets.
            let early = space == DATA && s.keys.is_none() && self.early.is_some();
            if s.keys.is_none() && !early {
                continue;
            }
            frames.clear();
            let mut carried = Vec::new();
            let ack = s.ack_owed;
            let ack_due = s.ack_due(now);
            if ack {
                // The delay since the largest came, in units of 2^3 us (1-RTT only: the
                // handshake spaces acknowledge at once).
                let waited =
                    s.largest_at.map_or(0, |t| now.saturating_duration_since(t).as_micros());
                let delay = if space == DATA { (waited >> 3) as u64 } else { 0 };
                frame::put_ack(&mut frames, &s.received, delay);
            }
            let room = self.mtu.saturating_sub(out.len() - start + 100);
            while let Some((off, end)) = s.crypto_lost.pop_front() {
                let n = (end - off).min(room.saturating_sub(frames.len()) as u64);
                if n == 0 {
                    s.crypto_lost.push_front((off, end));
                    break;
                }
                let data = &s.crypto_out[off as usize..(off + n) as usize];
                frame::put_crypto(&mut frames, off, data);
                carried.push(Retx::Crypto { offset: off, len: n });
                if off + n < end {
                    s.crypto_lost.push_front((off + n, end));
                    break;
                }
            }
            let unsent = &s.crypto_out[s.crypto_sent as usize..];
            let n = unsent.len().min(room.saturating_sub(frames.len()));
            if n > 0 {
                frame::put_crypto(&mut frames, s.crypto_sent, &unsent[..n]);
                carried.push(Retx::Crypto { offset: s.crypto_sent, len: n as u64 });
                s.crypto_sent += n as u64;
            }
            let probe = s.probe;
            if space == DATA && (self.cc.room() || probe) && (probe || self.paced(now)) {
                // A short header's bytes and the tag: 1 + the connection ID + 4 + 16; a 0-RTT
                // packet's long header adds the version, both IDs' lengths, this side's ID
                // and its two-byte length.
                let long = if early { 8 + self.scid.len() } else { 0 };
                let used = out.len() - start + frames.len() + self.dcid.len() + 21 + long;
                let room = self.mtu.saturating_sub(used);
                if self.streams.has_pending() {
                    carried.reserve(8);
                }
                self.streams.write_frames(&mut frames, room, &mut carried);
            }
            let s = &mut self.spaces[space];
            if s.probe && carried.is_empty() {
                // Nothing to send again: a PING makes the probe ack-eliciting.
                frame::put_simple(&mut frames, 0x01, &[]);
            }
            let eliciting = !carried.is_empty() || s.probe;
            let lone_ack = ack && !eliciting && !(early && pad_owed);
            if lone_ack && !ack_due {
                // Only an ACK that may wait: it goes with the next packet, or when due.
                frames.clear();
                continue;
            }
            s.probe = false;
            if ack {
                s.acked();
                self.counts.acks_out += 1;
            }
            if frames.is_empty() && !(early && pad_owed) {
                continue;
            }
            let pn = s.next_pn;
            s.next_pn += 1;
            let local = match (&s.keys, &self.early) {
                (Some((local, _)), _) => local,
                (None, Some(early)) => early,
                (None, None) => continue,
            };
            let phase = self.key_update.as_ref().is_some_and(|u| u.phase);
            let kind = if early { Kind::ZeroRtt } else { kind_of(space) };
            let head = head(kind, &self.dcid, &self.scid, &self.token, phase);
            // An Initial's datagram is padded to 1,200 bytes: the Initial itself takes the
            // padding (the others fit in what is left), or the 0-RTT packet after it. A 1-RTT
            // packet within [`FULL_SLACK`] of filling its datagram fills it, so that a run of
            // full datagrams is of one size and goes as one GSO buffer
            // ([`Client::append_transmit`]'s caller).
            let in_datagram = out.len() - start;
            let full = in_datagram + frames.len() + self.dcid.len() + 21 + FULL_SLACK >= self.mtu;
            let min = match space {
                INITIAL if !early_follows => MTU,
                DATA if early && pad_owed => MTU.saturating_sub(in_datagram),
                DATA if !early && full => self.mtu.saturating_sub(in_datagram),
                _ => 0,
            };
            let acked = s.flight.largest_acked;
            let before = out.len();
            if packet::seal(out, head, pn, acked, &frames, min, local).is_err() {
                self.failed = Some(Error::Protocol("a packet could not be sealed".into()));
                out.truncate(start);
                return 0;
            }

            let size = out.len() - before;
            s.flight.on_sent(Sent { pn, at: now, size, eliciting, frames: carried }, &mut self.cc);
            if space == DATA && eliciting {
                self.pacer.sent(size);
            }
            initial_sent |= space == INITIAL;
            pad_owed = (pad_owed || space == INITIAL && early_follows) && !early;
            self.counts.packets_out += 1;
            if space == HANDSHAKE && self.spaces[INITIAL].keys.is_some() {
                // Sending in the Handshake space ends the Initial one (RFC 9001 4.9.1).
                self.drop_space(INITIAL);
            }
            if initial_sent && out.len() - start >= MTU {
                break;
            }
        }
        self.frames = frames;
        if let Some(f) = close {
            self.send_close(out, &f);
        }
        out.len() - start
    }

    /// The largest datagram this connection sends (what the path was found to carry).
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Appends a path MTU probe to `out` when one is due (RFC 8899: once the handshake is
    /// confirmed, one at a time, within the congestion window): a 1-RTT packet of a PING
    /// padded to the size tried, alone in its datagram. Its length, 0 when none went.
    pub fn probe_mtu(&mut self, out: &mut Vec<u8>, now: Instant) -> usize {
        if !self.confirmed || self.failed.is_some() || self.close.is_some() || !self.cc.room() {
            return 0;
        }
        let Some(size) = self.mtu_search.next() else { return 0 };
        let s = &mut self.spaces[DATA];
        let Some((local, _)) = &s.keys else { return 0 };
        let start = out.len();
        let pn = s.next_pn;
        let phase = self.key_update.as_ref().is_some_and(|u| u.phase);
        let head = head(Kind::OneRtt, &self.dcid, &self.scid, &self.token, phase);
        let ping = [0x01];
        if packet::seal(out, head, pn, s.flight.largest_acked, &ping, size, local).is_err() {
            out.truncate(start);
            return 0;
        }
        s.next_pn += 1;
        let len = out.len() - start;
        let probe = Retx::MtuProbe(u16::try_from(len).unwrap_or(u16::MAX));
        let sent = Sent { pn, at: now, size: len, eliciting: true, frames: vec![probe] };
        s.flight.on_sent(sent, &mut self.cc);
        self.mtu_search.probing = Some(len);
        self.mtu_search.tried = true;
        self.counts.packets_out += 1;
        self.counts.mtu_probes += 1;
        len
    }

    /// The packet carrying a CONNECTION_CLOSE, in the newest space with keys.
    fn send_close(&mut self, out: &mut Vec<u8>, f: &[u8]) -> bool {
        let Some(space) = (INITIAL..=DATA).rev().find(|&i| self.spaces[i].keys.is_some()) else {
            return false;
        };
        let s = &mut self.spaces[space];
        let pn = s.next_pn;
        s.next_pn += 1;
        let Some((local, _)) = &s.keys else { return false };
        let phase = self.key_update.as_ref().is_some_and(|u| u.phase);
        let head = head(kind_of(space), &self.dcid, &self.scid, &self.token, phase);
        let min = if space == INITIAL { MTU } else { 0 };
        let ok = packet::seal(out, head, pn, s.flight.largest_acked, f, min, local).is_ok();
        self.counts.packets_out += u64::from(ok);
        ok
    }

    /// A space's keys go, and with them what it had in flight.
    fn drop_space(&mut self, space: usize) {
        let s = &mut self.spaces[space];
        s.keys = None;
        s.crypto_lost.clear();
        s.flight.discard(&mut self.cc);
    }

    /// An ACK in `space`: what it acknowledges is done with, what it shows lost goes again.
    fn on_ack(
        &mut self,
        space: usize,
        ranges: impl Iterator<Item = (u64, u64)>,
        delay: Duration,
        now: Instant,
    ) {
        let (mut acked, mut lost) = (Vec::new(), Vec::new());
        let s = &mut self.spaces[space];
        let new = s.flight.on_ack(
            ranges,
            delay,
            now,
            &mut self.rtt,
            &mut self.cc,
            &mut |r| acked.push(*r),
            &mut |r| lost.push(*r),
        );
        if new {
            self.pto_count = 0;
        }
        for r in &acked {
            if let Retx::MtuProbe(size) = *r {
                // The path carries datagrams of this size: they are the size from now on.
                let size = usize::from(size);
                self.mtu_search.floor = size;
                self.mtu_search.probing = None;
                self.mtu = self.mtu.max(size);
                continue;
            }
            self.streams.on_acked(r);
        }
        self.resend(space, &lost);
        self.black_hole();
    }

    /// A run of lost datagrams larger than [`MTU`] with none acknowledged, or probe timeouts
    /// in a row (nothing came back to show a loss by): the path may have stopped carrying the
    /// size found (RFC 8899 section 4.3); back to [`MTU`], searching again below it.
    fn black_hole(&mut self) {
        let silent = self.pto_count >= 2;
        if self.mtu > MTU && (self.cc.large_lost_run >= BLACK_HOLE_RUN || silent) {
            let failed = self.mtu;
            self.mtu = MTU;
            self.cc.large_lost_run = 0;
            self.mtu_search =
                MtuSearch { floor: MTU, ceiling: failed - 1, probing: None, tried: true };
            self.counts.black_holes += 1;
        }
    }

    /// What lost packets of `space` carried goes again.
    fn resend(&mut self, space: usize, lost: &[Retx]) {
        for r in lost {
            match *r {
                Retx::Crypto { offset, len } => {
                    self.spaces[space].crypto_lost.push_back((offset, offset + len));
                }
                Retx::MtuProbe(size) => {
                    // Too large for the path (or lost by chance: the search is cautious).
                    self.mtu_search.ceiling = usize::from(size) - 1;
                    self.mtu_search.probing = None;
                }
                _ => self.streams.on_lost(r),
            }
        }
    }

    /// When [`Client::handle_timeout`] is due: a packet's loss by time, or the probe timeout.
    pub fn timeout(&self) -> Option<Instant> {
        if self.failed.is_some() {
            return None;
        }
        let loss = self.spaces.iter().filter_map(|s| s.flight.loss_time).min();
        let recovery = loss.or_else(|| self.pto().map(|(at, _)| at));
        let pace = self.pace_at.filter(|_| self.streams.has_pending());
        let ack = self.spaces.iter().filter(|s| s.ack_owed).filter_map(|s| s.ack_at).min();
        [recovery, self.idle_at, pace, ack].into_iter().flatten().min()
    }

    /// Whether the pacer lets new data go at `now`; if not, when it will is kept (a timer).
    fn paced(&mut self, now: Instant) -> bool {
        if !self.streams.has_pending() {
            return true;
        }
        self.pace_at = self.pacer.delay(now, self.cc.window, self.rtt.smoothed);
        self.pace_at.is_none()
    }

    /// The probe timeout and its space: the earliest space with ack-eliciting packets in
    /// flight, doubled for each probe in a row.
    fn pto(&self) -> Option<(Instant, usize)> {
        (INITIAL..=DATA)
            .filter(|&i| {
                self.spaces[i].keys.is_some() && self.spaces[i].flight.eliciting_in_flight()
            })
            .filter_map(|i| {
                let f = &self.spaces[i].flight;
                let delay = if i == DATA { MAX_ACK_DELAY } else { Duration::ZERO };
                let wait = self.rtt.pto(delay) * 2u32.saturating_pow(self.pto_count.min(16));
                Some((f.last_eliciting? + wait, i))
            })
            .min()
    }

    /// Timers due at `now`: packets lost by time go again; at the probe timeout, the oldest
    /// packet in flight of its space goes again (or a PING), and the timeout doubles.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.failed.is_some() {
            return;
        }
        if self.idle_at.is_some_and(|t| t <= now) {
            self.failed = Some(Error::TimedOut);
            return;
        }
        if self.pace_at.is_some_and(|t| t <= now) {
            // The next send asks the pacer again.
            self.pace_at = None;
        }
        for space in [INITIAL, HANDSHAKE, DATA] {
            let s = &mut self.spaces[space];
            if s.flight.loss_time.is_some_and(|t| t <= now) {
                let mut lost = Vec::new();
                s.flight.detect_lost(now, &self.rtt, &mut self.cc, &mut |r| lost.push(*r));
                self.resend(space, &lost);
                self.black_hole();
                return;
            }
        }
        if let Some((at, space)) = self.pto() {
            if at <= now {
                self.pto_count += 1;
                self.counts.probes += 1;
                self.black_hole();
                let frames = self.spaces[space].flight.probe_frames();
                self.resend(space, &frames);
                self.spaces[space].probe = true;
            }
        }
    }
}

/// The kind of packet `space` (0 Initial, 1 Handshake, 2 1-RTT) sends once it has its keys.
pub(crate) fn kind_of(space: usize) -> Kind {
    match space {
        INITIAL => Kind::Initial,
        HANDSHAKE => Kind::Handshake,
        _ => Kind::OneRtt,
    }
}

/// The header of a packet of `kind`: short in 1-RTT (with its key phase), long before (an
/// Initial's with `token`).
pub(crate) fn head<'a>(
    kind: Kind,
    dcid: &'a [u8],
    scid: &'a [u8],
    token: &'a [u8],
    key_phase: bool,
) -> Head<'a> {
    match kind {
        Kind::OneRtt => Head::Short { dcid, key_phase },
        _ => Head::Long(Long {
            kind,
            version: packet::V1,
            dcid,
            scid,
            token: if kind == Kind::Initial { token } else { &[] },
        }),
    }
}

/// How long a connection may go without a packet from the server (sent as max_idle_timeout;
/// a shorter one of the server's is taken).
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long this client may hold an acknowledgement it owes in the 1-RTT space, waiting for
/// a packet of its own to carry it or a second packet to acknowledge (the default
/// max_ack_delay, which it does not change, RFC 9000 section 18.2).
const ACK_DELAY: Duration = Duration::from_millis(25);

/// The acknowledgement delay the server may take (its max_ack_delay, 25 ms unless it says
/// otherwise).
const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

/// The connection IDs a server's transport parameters name (RFC 9000 section 7.3).
struct PeerIds<'a> {
    /// original_destination_connection_id: the one this client chose first.
    odcid: &'a [u8],
    /// initial_source_connection_id: the server's, as its first Initial gave it.
    iscid: &'a [u8],
    /// retry_source_connection_id: its Retry's, when it sent one.
    retry_scid: Option<&'a [u8]>,
}

/// The server's transport parameters (RFC 9000 section 18.2): the limits this client keeps
/// to, and the connection IDs they name. None when they do not parse or a required ID is
/// missing.
fn peer_params(mut b: &[u8]) -> Option<(PeerLimits, PeerIds<'_>)> {
    use qpslab_http::h3::varint;
    let (mut limits, mut odcid, mut iscid) = (PeerLimits::default(), None, None);
    let mut retry_scid = None;
    while !b.is_empty() {
        let (id, n) = varint::read(b)?;
        let (len, m) = varint::read(&b[n..])?;
        let value = b.get(n + m..n + m + usize::try_from(len).ok()?)?;
        b = &b[n + m + value.len()..];
        let int = || varint::read(value).filter(|&(_, k)| k == value.len()).map(|(v, _)| v);
        match id {
            0x00 => odcid = Some(value),
            0x0f => iscid = Some(value),
            0x10 => retry_scid = Some(value),
            0x04 => limits.max_data = int()?,
            0x06 => limits.stream_bidi = int()?,
            0x07 => limits.stream_uni = int()?,
            0x08 => limits.max_bidi = int()?,
            0x09 => limits.max_uni = int()?,
            0x01 => limits.idle_ms = int()?,
            0x03 => limits.max_udp_payload = int()?,
            _ => {}
        }
    }
    Some((limits, PeerIds { odcid: odcid?, iscid: iscid?, retry_scid }))
}

/// The transport parameters a client sends (RFC 9000 section 18.2): its connection ID
/// (initial_source_connection_id, which it must send), and the limits it gives the server.
fn params(scid: &[u8]) -> Vec<u8> {
    let mut p = Params::default();
    p.bytes(0x0f, scid);
    p.int(0x01, IDLE_TIMEOUT.as_millis() as u64); // max_idle_timeout, ms
    p.int(0x04, crate::streams::CONN_WINDOW); // initial_max_data
    p.int(0x05, crate::streams::STREAM_WINDOW); // initial_max_stream_data_bidi_local
    p.int(0x06, crate::streams::STREAM_WINDOW); // initial_max_stream_data_bidi_remote
    p.int(0x07, crate::streams::STREAM_WINDOW); // initial_max_stream_data_uni
    p.int(0x09, crate::streams::PEER_UNI); // initial_max_streams_uni
    p.0
}

/// Transport parameters as they are encoded (RFC 9000 section 18): each an ID, a length and
/// a value.
#[derive(Debug, Default)]
pub(crate) struct Params(pub Vec<u8>);

impl Params {
    pub fn bytes(&mut self, id: u64, value: &[u8]) {
        qpslab_http::h3::varint::put(&mut self.0, id);
        qpslab_http::h3::varint::put(&mut self.0, value.len() as u64);
        self.0.extend_from_slice(value);
    }

    /// An integer parameter (a varint as its value).
    pub fn int(&mut self, id: u64, value: u64) {
        let mut b = Vec::with_capacity(8);
        qpslab_http::h3::varint::put(&mut b, value);
        self.bytes(id, &b);
    }
}

#[cfg(test)]
mod tests {
    use super::add_range;

    #[test]
    fn received_numbers_make_ranges_largest_first() {
        let mut r = Vec::new();
        for pn in [0, 1, 2, 5, 4, 9, 3, 9, 7] {
            add_range(&mut r, pn);
        }
        assert_eq!(r, [(9, 9), (7, 7), (0, 5)]);
        add_range(&mut r, 8);
        assert_eq!(r, [(7, 9), (0, 5)]);
        add_range(&mut r, 6);
        assert_eq!(r, [(0, 9)]);
    }
}
