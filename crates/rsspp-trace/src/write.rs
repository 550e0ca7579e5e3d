//! pcap writer (the classic libpcap format, which tcpdump, Wireshark and
//! tcpreplay all read), with a snaplen: frames longer than it are stored
//! cut, with their original length kept in the record header, as the RSS++
//! authors stored their campus trace.

use std::io::Write;

use crate::error::TraceError;

/// Timestamp precision of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimePrecision {
    /// Microseconds (magic `0xa1b2c3d4`): the most widely read variant.
    Micro,
    /// Nanoseconds (magic `0xa1b23c4d`).
    Nano,
}

/// Largest snaplen libpcap accepts.
pub const MAX_SNAPLEN: u32 = 262_144;

/// Checks a snaplen (1..=[`MAX_SNAPLEN`]) before anything is written.
pub fn check_snaplen(snaplen: u32) -> Result<(), TraceError> {
    if snaplen == 0 || snaplen > MAX_SNAPLEN {
        return Err(TraceError::InvalidOption(format!(
            "snaplen must be between 1 and {MAX_SNAPLEN} bytes, got {snaplen}"
        )));
    }
    Ok(())
}

/// Writes Ethernet frames to a pcap stream.
pub struct PcapWriter<W: Write> {
    out: W,
    snaplen: u32,
    precision: TimePrecision,
    packets: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header. `snaplen` is the most bytes stored per frame
    /// (1..=262144).
    pub fn new(mut out: W, snaplen: u32, precision: TimePrecision) -> Result<Self, TraceError> {
        check_snaplen(snaplen)?;
        let magic: u32 = match precision {
            TimePrecision::Micro => 0xa1b2_c3d4,
            TimePrecision::Nano => 0xa1b2_3c4d,
        };
        let mut header = [0u8; 24];
        header[0..4].copy_from_slice(&magic.to_le_bytes());
        header[4..6].copy_from_slice(&2u16.to_le_bytes());
        header[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0.
        header[16..20].copy_from_slice(&snaplen.to_le_bytes());
        header[20..24].copy_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
        out.write_all(&header)?;
        Ok(Self {
            out,
            snaplen,
            precision,
            packets: 0,
        })
    }

    /// Appends one frame. `frame` holds at least the bytes to store (it may
    /// be shorter than `wire_len`: the rest of the frame is not kept
    /// anyway when the snaplen cuts it, and is zero padding otherwise).
    pub fn write_frame(
        &mut self,
        timestamp_ns: u64,
        frame: &[u8],
        wire_len: u32,
    ) -> Result<(), TraceError> {
        let wire_len = wire_len.max(frame.len() as u32);
        let stored = wire_len.min(self.snaplen);
        let (secs, fraction) = (timestamp_ns / 1_000_000_000, timestamp_ns % 1_000_000_000);
        let fraction = match self.precision {
            TimePrecision::Micro => fraction / 1_000,
            TimePrecision::Nano => fraction,
        };
        let mut header = [0u8; 16];
        header[0..4].copy_from_slice(&(secs as u32).to_le_bytes());
        header[4..8].copy_from_slice(&(fraction as u32).to_le_bytes());
        header[8..12].copy_from_slice(&stored.to_le_bytes());
        header[12..16].copy_from_slice(&wire_len.to_le_bytes());
        self.out.write_all(&header)?;
        let from_frame = (stored as usize).min(frame.len());
        self.out.write_all(&frame[..from_frame])?;
        let mut padding = stored as usize - from_frame;
        const ZEROS: [u8; 256] = [0; 256];
        while padding > 0 {
            let n = padding.min(ZEROS.len());
            self.out.write_all(&ZEROS[..n])?;
            padding -= n;
        }
        self.packets += 1;
        Ok(())
    }

    /// Frames written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.out.flush()?;
        Ok(self.out)
    }
}
