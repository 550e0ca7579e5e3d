//! Streaming pcap and pcapng reader: one record at a time, in a buffer of
//! bounded size, so memory does not grow with the file.

use std::io::Read;

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

/// What the reader met besides packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// Packet records read.
    pub records: u64,
    /// The file ends in the middle of a record (a capture that was cut
    /// short); everything before it was read.
    pub truncated_tail: bool,
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
    /// pcapng: the interfaces of the current section.
    interfaces: Vec<Interface>,
    capacity: usize,
    counts: ReadCounts,
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
            interfaces: Vec::new(),
            capacity: INITIAL_BUFFER,
            counts: ReadCounts::default(),
        })
    }

    /// Reads from a byte slice (tests, benchmarks, fuzzing).
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self, TraceError> {
        Self::new(bytes)
    }

    /// What was met so far besides packets.
    pub fn counts(&self) -> ReadCounts {
        self.counts
    }

    /// The next packet, `Ok(None)` at the end of the capture (including a
    /// capture whose last record is cut short: see [`ReadCounts::truncated_tail`]).
    pub fn next_record(&mut self) -> Result<Option<PacketRecord>, TraceError> {
        let mut stalled = 0;
        loop {
            let consumed = self.inner.consumed() as u64;
            match self.inner.next() {
                Ok((offset, block)) => {
                    let record = match block {
                        PcapBlockOwned::LegacyHeader(header) => {
                            self.legacy = Some((
                                LinkType::from_pcap(header.network.0 as u32),
                                header.is_nanosecond_precision(),
                            ));
                            None
                        }
                        PcapBlockOwned::Legacy(b) => {
                            let Some((link, nanos)) = self.legacy else {
                                return Err(TraceError::Malformed {
                                    offset: consumed,
                                    reason: "packet record before the file header".into(),
                                });
                            };
                            let fraction = u64::from(b.ts_usec);
                            let ts = u64::from(b.ts_sec) * 1_000_000_000
                                + if nanos { fraction } else { fraction * 1_000 };
                            let data = &b.data[..(b.caplen as usize).min(b.data.len())];
                            Some(frame(&mut self.counts, link, data, ts, b.origlen))
                        }
                        PcapBlockOwned::NG(Block::SectionHeader(_)) => {
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
                                    Some(frame(&mut self.counts, iface.link, data, ts, epb.origlen))
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
                                    Some(frame(&mut self.counts, iface.link, data, 0, spb.origlen))
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
                Err(PcapError::UnexpectedEof) => {
                    self.counts.truncated_tail = true;
                    return Ok(None);
                }
                Err(PcapError::Incomplete(_)) => {
                    stalled += 1;
                    if stalled > 3 {
                        self.counts.truncated_tail = true;
                        return Ok(None);
                    }
                    self.inner.refill().map_err(|_| TraceError::Read)?;
                }
                Err(PcapError::BufferTooSmall) => {
                    if self.capacity >= MAX_RECORD_BYTES {
                        return Err(TraceError::RecordTooLarge {
                            offset: self.inner.consumed() as u64,
                            limit: MAX_RECORD_BYTES,
                        });
                    }
                    self.capacity *= 2;
                    self.inner.grow(self.capacity);
                    self.inner.refill().map_err(|_| TraceError::Read)?;
                }
                Err(PcapError::ReadError) => return Err(TraceError::Read),
                Err(e) => {
                    let reason = match e {
                        PcapError::NomError(_, kind) | PcapError::OwnedNomError(_, kind) => {
                            format!("unreadable record ({})", kind.description())
                        }
                        other => format!("{other:?}"),
                    };
                    return Err(TraceError::Malformed {
                        offset: self.inner.consumed() as u64,
                        reason,
                    });
                }
            }
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
