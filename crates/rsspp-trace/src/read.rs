//! Streaming pcap and pcapng reader: one record at a time, in a buffer of
//! bounded size, so memory does not grow with the file.

use std::borrow::Cow;
use std::io::Read;

use pcap_parser::nom::error::ErrorKind;
use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{create_reader, PcapBlockOwned, PcapError};

use crate::error::TraceError;
use crate::parse::{parse_frame, LinkType};
use crate::record::PacketRecord;

/// Initial read buffer.
const INITIAL_BUFFER: usize = 256 << 10;
/// The buffer never grows beyond this: a record that claims to be larger is
/// an error, not an allocation.
pub const MAX_RECORD_BYTES: usize = 16 << 20;
/// Largest packet a pcap record may hold (libpcap's limit for every link
/// type this reader parses; it refuses larger records as corrupt too).
pub const MAX_PACKET_BYTES: u64 = 262_144;
/// Largest pcapng packet block: a packet of [`MAX_PACKET_BYTES`] and room
/// for options.
const MAX_PACKET_BLOCK: u64 = MAX_PACKET_BYTES + (64 << 10);

/// What makes a record unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// Its length field claims more than any record can hold.
    Length {
        /// The length claimed, bytes.
        claimed: u64,
        /// The most a record of its kind may have.
        limit: u64,
    },
    /// A pcapng block length shorter than a block or not a multiple of 4.
    BlockLength {
        /// The length claimed, bytes.
        claimed: u64,
    },
    /// The record does not parse.
    Unreadable(&'static str),
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Corruption::Length { claimed, limit } => write!(
                f,
                "its length field claims {claimed} bytes, more than the {limit} a record can hold"
            ),
            Corruption::BlockLength { claimed } => write!(
                f,
                "its block length {claimed} is not a multiple of 4 of at least 12"
            ),
            Corruption::Unreadable(why) => write!(f, "unreadable record ({why})"),
        }
    }
}

/// Where a capture stops being readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CorruptRecord {
    /// Byte offset of the record in the file.
    pub offset: u64,
    /// Packets read before it.
    pub after_packets: u64,
    /// What is wrong with it (in words, in JSON).
    #[serde(serialize_with = "as_text")]
    pub what: Corruption,
}

fn as_text<S: serde::Serializer>(what: &Corruption, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(what)
}

impl std::fmt::Display for CorruptRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "corrupt record at byte {} (after packet {}): {}",
            self.offset, self.after_packets, self.what
        )
    }
}

/// What the reader met besides packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// Packet records read.
    pub records: u64,
    /// The file ends in the middle of its last record (a capture that was
    /// cut short, its length plausible); everything before it was read.
    pub truncated_tail: bool,
    /// With [`TraceReader::keep_partial`]: the record where the capture
    /// stopped being readable (everything from it on is skipped).
    pub corrupt: Option<CorruptRecord>,
    /// Bytes not read: from a corrupt record to the end of the file, or the
    /// part of a last record that is cut short.
    pub skipped_bytes: u64,
    /// Records skipped because they cannot be placed (a pcapng packet naming
    /// an interface that was never described, an invalid time resolution).
    pub skipped_records: u64,
    /// Records whose captured length exceeds their original length (the
    /// original length is then taken to be the captured one).
    pub inconsistent_lengths: u64,
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link: LinkType,
    /// Timestamp units per second.
    units_per_second: u64,
    offset_s: i64,
}

/// Reads packet records from a pcap or pcapng stream (format detected from
/// the magic number).
pub struct TraceReader<'a> {
    inner: Box<dyn PcapReaderIterator + Send + 'a>,
    /// Legacy pcap: link type and whether timestamps are in nanoseconds.
    legacy: Option<(LinkType, bool)>,
    /// Legacy pcap: big-endian headers, and the record limit.
    legacy_format: (bool, u64),
    /// pcapng: the current section is big-endian.
    ng_big_endian: bool,
    /// pcapng: the interfaces of the current section.
    interfaces: Vec<Interface>,
    capacity: usize,
    counts: ReadCounts,
    keep_partial: bool,
    /// Nothing more to read (after a corrupt record, in keep-partial mode).
    done: bool,
}

/// Makes every `read` fill the buffer unless the input ends: pcap-parser
/// decides on the format from its first read, which must not come back
/// short just because a pipe delivered a few bytes.
struct FillingReader<R>(R);

impl<R: Read> Read for FillingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.0.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Report what was read; the error comes back on the next call.
                Err(_) if filled > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }
}

impl<'a> TraceReader<'a> {
    /// Opens a stream; fails if it is neither pcap nor pcapng.
    pub fn new<R: Read + Send + 'a>(input: R) -> Result<Self, TraceError> {
        let inner = create_reader(INITIAL_BUFFER, FillingReader(input)).map_err(|e| match e {
            PcapError::Eof => TraceError::Empty,
            PcapError::Incomplete(_) | PcapError::UnexpectedEof => TraceError::TruncatedHeader,
            PcapError::ReadError => TraceError::Read,
            _ => TraceError::NotPcap,
        })?;
        Ok(Self {
            inner,
            legacy: None,
            legacy_format: (false, MAX_PACKET_BYTES),
            ng_big_endian: false,
            interfaces: Vec::new(),
            capacity: INITIAL_BUFFER,
            counts: ReadCounts::default(),
            keep_partial: false,
            done: false,
        })
    }

    /// What to do at a corrupt record before the end of the capture: by
    /// default [`next_record`](Self::next_record) fails with
    /// [`TraceError::Corrupt`]; kept partial, the capture ends there, the
    /// packets before it are kept, and [`ReadCounts::corrupt`] and
    /// [`ReadCounts::skipped_bytes`] say what was left out.
    pub fn keep_partial(mut self, keep: bool) -> Self {
        self.keep_partial = keep;
        self
    }

    /// Reads from a byte slice (tests, benchmarks, fuzzing).
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self, TraceError> {
        Self::new(bytes)
    }

    /// What was met so far besides packets.
    pub fn counts(&self) -> ReadCounts {
        self.counts
    }

    /// The length the record at the reading position claims, if it is
    /// beyond what any record can have (the bytes left start with it).
    fn implausible_length(&self) -> Option<Corruption> {
        let data = self.inner.data();
        let u32_at = |at: usize, big: bool| -> Option<u64> {
            let b: [u8; 4] = data.get(at..at + 4)?.try_into().ok()?;
            Some(u64::from(if big {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }))
        };
        if self.legacy.is_some() {
            let (big, limit) = self.legacy_format;
            let claimed = u32_at(8, big)?;
            return (claimed > limit).then_some(Corruption::Length { claimed, limit });
        }
        let mut big = self.ng_big_endian;
        let block_type = u32_at(0, big)?;
        if block_type == 0x0a0d_0d0a {
            // A section header gives its own byte order.
            big = data.get(8..12)? == [0x1a, 0x2b, 0x3c, 0x4d];
        }
        let claimed = u32_at(4, big)?;
        if claimed < 12 || claimed % 4 != 0 {
            return Some(Corruption::BlockLength { claimed });
        }
        // Obsolete packet, simple packet and enhanced packet blocks.
        let limit = if matches!(u32_at(0, big)?, 2 | 3 | 6) {
            MAX_PACKET_BLOCK
        } else {
            MAX_RECORD_BYTES as u64
        };
        (claimed > limit).then_some(Corruption::Length { claimed, limit })
    }

    /// The capture is unreadable from the reading position on: an error, or
    /// in keep-partial mode the end of the capture, the rest counted.
    fn corrupt<T>(&mut self, what: Corruption) -> Result<Option<T>, TraceError> {
        let record = CorruptRecord {
            offset: self.inner.consumed() as u64,
            after_packets: self.counts.records,
            what,
        };
        if !self.keep_partial {
            return Err(TraceError::Corrupt(record));
        }
        self.counts.corrupt = Some(record);
        self.done = true;
        // Count the bytes left, reading them through the parser's buffer.
        loop {
            let n = self.inner.data().len();
            self.inner.consume(n);
            self.counts.skipped_bytes += n as u64;
            if n == 0 && self.inner.reader_exhausted() {
                return Ok(None);
            }
            self.inner.refill().map_err(|_| TraceError::Read)?;
        }
    }

    /// The input ends inside a record: a cut-short last record when its
    /// length is plausible, a corrupt one otherwise.
    fn ends_inside_a_record<T>(&mut self) -> Result<Option<T>, TraceError> {
        if let Some(what) = self.implausible_length() {
            return self.corrupt(what);
        }
        self.counts.truncated_tail = true;
        self.counts.skipped_bytes += self.inner.data().len() as u64;
        self.done = true;
        Ok(None)
    }

    /// The next packet, `Ok(None)` at the end of the capture (including a
    /// capture whose last record is cut short: see
    /// [`ReadCounts::truncated_tail`]). A record before the end that cannot
    /// be read is a [`TraceError::Corrupt`] (see [`keep_partial`](Self::keep_partial)).
    pub fn next_record(&mut self) -> Result<Option<PacketRecord>, TraceError> {
        self.next_with(frame)
    }

    /// The next packet as captured: its bytes, its link type and
    /// timestamp, for a sender (`rsspp trace replay`); the end and corrupt
    /// records as for [`next_record`](Self::next_record).
    pub fn next_raw(&mut self) -> Result<Option<RawFrame>, TraceError> {
        self.next_with(|counts, link, data, ts, origlen| {
            if (origlen as usize) < data.len() {
                counts.inconsistent_lengths += 1;
            }
            RawFrame {
                timestamp_ns: ts,
                link,
                data: data.to_vec(),
                wire_len: origlen.max(data.len() as u32),
            }
        })
    }

    /// Reads up to the next packet and makes `make` of it.
    fn next_with<T>(
        &mut self,
        make: impl Fn(&mut ReadCounts, LinkType, &[u8], u64, u32) -> T,
    ) -> Result<Option<T>, TraceError> {
        if self.done {
            return Ok(None);
        }
        let mut stalled = 0;
        loop {
            let consumed = self.inner.consumed() as u64;
            match self.inner.next() {
                Ok((offset, block)) => {
                    let record = match block {
                        PcapBlockOwned::LegacyHeader(header) => {
                            let linktype = header.network.0 as u32;
                            self.legacy = Some((
                                LinkType::from_pcap(linktype),
                                header.is_nanosecond_precision(),
                            ));
                            // libpcap's larger limits: D-Bus, USBPcap, EBHSCR.
                            let limit = match linktype {
                                231 | 249 | 279 => MAX_RECORD_BYTES as u64,
                                _ => MAX_PACKET_BYTES,
                            };
                            self.legacy_format = (header.is_bigendian(), limit);
                            None
                        }
                        PcapBlockOwned::Legacy(b) => {
                            let Some((link, nanos)) = self.legacy else {
                                return Err(TraceError::Malformed {
                                    offset: consumed,
                                    reason: "packet record before the file header".into(),
                                });
                            };
                            let limit = self.legacy_format.1;
                            if u64::from(b.caplen) > limit {
                                let claimed = u64::from(b.caplen);
                                return self.corrupt(Corruption::Length { claimed, limit });
                            }
                            let fraction = u64::from(b.ts_usec);
                            let ts = u64::from(b.ts_sec) * 1_000_000_000
                                + if nanos { fraction } else { fraction * 1_000 };
                            let data = &b.data[..(b.caplen as usize).min(b.data.len())];
                            Some(make(&mut self.counts, link, data, ts, b.origlen))
                        }
                        PcapBlockOwned::NG(Block::SectionHeader(shb)) => {
                            self.ng_big_endian = shb.big_endian();
                            self.interfaces.clear();
                            None
                        }
                        PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                            self.interfaces.push(Interface {
                                link: LinkType::from_pcap(idb.linktype.0 as u32),
                                units_per_second: idb.ts_resolution().unwrap_or(0),
                                offset_s: idb.ts_offset(),
                            });
                            None
                        }
                        PcapBlockOwned::NG(Block::EnhancedPacket(epb))
                            if u64::from(epb.block_len1) > MAX_PACKET_BLOCK =>
                        {
                            let claimed = u64::from(epb.block_len1);
                            return self.corrupt(Corruption::Length {
                                claimed,
                                limit: MAX_PACKET_BLOCK,
                            });
                        }
                        PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                            match self.interfaces.get(epb.if_id as usize).copied() {
                                Some(iface) if iface.units_per_second > 0 => {
                                    let units =
                                        (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                                    let ns = (u128::from(units) * 1_000_000_000
                                        / u128::from(iface.units_per_second))
                                        as i128
                                        + i128::from(iface.offset_s) * 1_000_000_000;
                                    let ts = ns.clamp(0, i128::from(u64::MAX)) as u64;
                                    let data =
                                        &epb.data[..(epb.caplen as usize).min(epb.data.len())];
                                    Some(make(&mut self.counts, iface.link, data, ts, epb.origlen))
                                }
                                _ => {
                                    self.counts.skipped_records += 1;
                                    None
                                }
                            }
                        }
                        PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                            match self.interfaces.first().copied() {
                                Some(iface) => {
                                    let data =
                                        &spb.data[..(spb.origlen as usize).min(spb.data.len())];
                                    Some(make(&mut self.counts, iface.link, data, 0, spb.origlen))
                                }
                                None => {
                                    self.counts.skipped_records += 1;
                                    None
                                }
                            }
                        }
                        PcapBlockOwned::NG(_) => None,
                    };
                    self.inner.consume(offset);
                    stalled = 0;
                    if record.is_some() {
                        self.counts.records += 1;
                        return Ok(record);
                    }
                }
                Err(PcapError::Eof) => return Ok(None),
                Err(PcapError::UnexpectedEof) => return self.ends_inside_a_record(),
                Err(PcapError::Incomplete(_)) => {
                    stalled += 1;
                    if stalled > 3 {
                        return self.ends_inside_a_record();
                    }
                    self.inner.refill().map_err(|_| TraceError::Read)?;
                }
                Err(PcapError::BufferTooSmall) => {
                    if let Some(what) = self.implausible_length() {
                        return self.corrupt(what);
                    }
                    if self.capacity >= MAX_RECORD_BYTES {
                        let claimed = self.capacity as u64;
                        return self.corrupt(Corruption::Length {
                            claimed,
                            limit: MAX_RECORD_BYTES as u64,
                        });
                    }
                    self.capacity *= 2;
                    self.inner.grow(self.capacity);
                    self.inner.refill().map_err(|_| TraceError::Read)?;
                }
                Err(PcapError::ReadError) => return Err(TraceError::Read),
                Err(e) => {
                    let why = match e {
                        PcapError::NomError(_, kind) | PcapError::OwnedNomError(_, kind) => {
                            match kind {
                                ErrorKind::Verify => "its fields disagree",
                                ErrorKind::Eof | ErrorKind::Complete => "it is cut short",
                                _ => "it does not parse",
                            }
                        }
                        _ => "unrecognised block",
                    };
                    return self.corrupt(Corruption::Unreadable(why));
                }
            }
        }
    }
}

/// A packet as captured (see [`TraceReader::next_raw`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// Capture time, ns since the epoch (0 when the capture has none).
    pub timestamp_ns: u64,
    /// How the bytes start (Ethernet, an IP header, a cooked header).
    pub link: LinkType,
    /// The captured bytes (perhaps fewer than were on the wire).
    pub data: Vec<u8>,
    /// The frame's length on the wire.
    pub wire_len: u32,
}

/// The addresses an Ethernet header made for a frame captured without one:
/// locally administered, destination then source.
pub const MADE_UP_MACS: [u8; 12] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];

impl RawFrame {
    /// The frame as Ethernet, to be sent out of an interface: an Ethernet
    /// capture's bytes as they are; a cooked (`tcpdump -i any`: SLL,
    /// SLL2) or raw-IP capture's behind an Ethernet header with its
    /// EtherType and [`MADE_UP_MACS`]. `None` for another link type or a
    /// frame too short for its header.
    pub fn to_ethernet(&self) -> Option<Cow<'_, [u8]>> {
        let behind = |ether_type: [u8; 2], payload: &[u8]| {
            let mut out = Vec::with_capacity(14 + payload.len());
            out.extend_from_slice(&MADE_UP_MACS);
            out.extend_from_slice(&ether_type);
            out.extend_from_slice(payload);
            Some(Cow::Owned(out))
        };
        let d = &self.data;
        match self.link {
            LinkType::Ethernet if d.len() >= 14 => Some(Cow::Borrowed(d)),
            LinkType::LinuxSll if d.len() >= 16 => behind([d[14], d[15]], &d[16..]),
            LinkType::LinuxSll2 if d.len() >= 20 => behind([d[0], d[1]], &d[20..]),
            LinkType::RawIp => match d.first().map(|b| b >> 4) {
                Some(4) => behind([0x08, 0x00], d),
                Some(6) => behind([0x86, 0xdd], d),
                _ => None,
            },
            _ => None,
        }
    }
}

fn frame(
    counts: &mut ReadCounts,
    link: LinkType,
    data: &[u8],
    ts: u64,
    origlen: u32,
) -> PacketRecord {
    let wire_len = if (origlen as usize) < data.len() {
        counts.inconsistent_lengths += 1;
        data.len() as u32
    } else {
        origlen
    };
    parse_frame(link, data, ts, wire_len)
}

impl Iterator for TraceReader<'_> {
    type Item = Result<PacketRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

#[cfg(test)]
mod raw_frame_tests {
    use super::*;

    fn raw(link: LinkType, data: &[u8]) -> RawFrame {
        RawFrame {
            timestamp_ns: 0,
            link,
            data: data.to_vec(),
            wire_len: data.len() as u32,
        }
    }

    #[test]
    fn frames_become_ethernet_whatever_their_capture() {
        let ip = [0x45u8, 0, 0, 20];
        let eth: Vec<u8> = (0..14u8).chain(ip).collect();
        assert_eq!(
            &*raw(LinkType::Ethernet, &eth).to_ethernet().unwrap(),
            &eth[..]
        );
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        let mut sll2 = vec![0x08u8, 0x00];
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(&ip);
        let want: Vec<u8> = MADE_UP_MACS
            .iter()
            .copied()
            .chain([0x08, 0x00])
            .chain(ip)
            .collect();
        for f in [
            raw(LinkType::LinuxSll, &sll),
            raw(LinkType::LinuxSll2, &sll2),
            raw(LinkType::RawIp, &ip),
        ] {
            assert_eq!(&*f.to_ethernet().unwrap(), &want[..], "{:?}", f.link);
        }
        let v6 = raw(LinkType::RawIp, &[0x60, 0, 0, 0]);
        assert_eq!(&v6.to_ethernet().unwrap()[12..14], &[0x86, 0xdd]);
        assert!(raw(LinkType::Ethernet, &eth[..13]).to_ethernet().is_none());
        assert!(raw(LinkType::Other(105), &eth).to_ethernet().is_none());
        assert!(raw(LinkType::RawIp, &[0x10]).to_ethernet().is_none());
    }

    #[test]
    fn raw_frames_read_as_records_do() {
        let mut w = crate::PcapWriter::new(Vec::new(), 128, crate::TimePrecision::Nano).unwrap();
        w.write_frame(1_000, &[7u8; 60], 60).unwrap();
        w.write_frame(2_000, &[8u8; 60], 60).unwrap();
        let bytes = w.finish().unwrap();
        let mut r = TraceReader::from_bytes(&bytes).unwrap();
        let a = r.next_raw().unwrap().unwrap();
        assert_eq!(
            (a.timestamp_ns, a.link, a.wire_len),
            (1_000, LinkType::Ethernet, 60)
        );
        assert_eq!(a.data, vec![7u8; 60]);
        assert_eq!(r.next_raw().unwrap().unwrap().data, vec![8u8; 60]);
        assert_eq!(r.next_raw().unwrap(), None);
    }
}
