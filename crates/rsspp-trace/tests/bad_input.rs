//! Bad input never panics: a corpus of broken captures with their expected
//! outcome, and property tests (a fuzzer over arbitrary and mutated bytes).

use std::path::Path;

use proptest::prelude::*;
use rsspp_trace::read::{CorruptRecord, Corruption};
use rsspp_trace::{analyse, StatsConfig, TraceError, TraceReader, TraceReport};

fn corpus(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn analyse_bytes(bytes: &[u8]) -> Result<TraceReport, TraceError> {
    let mut reader = TraceReader::from_bytes(bytes)?;
    analyse(&mut reader, StatsConfig::default())
}

#[test]
fn the_corpus_gives_clear_errors_or_counted_skips() {
    let valid = analyse_bytes(&corpus("valid.pcap")).unwrap();
    assert_eq!(valid.packets, 14);
    assert!(!valid.truncated_tail);

    let cut = analyse_bytes(&corpus("truncated-record.pcap")).unwrap();
    assert_eq!(cut.packets, 13);
    assert!(cut.truncated_tail);

    assert!(matches!(
        analyse_bytes(&corpus("empty.pcap")),
        Err(TraceError::Empty)
    ));
    assert!(matches!(
        analyse_bytes(&corpus("garbage.bin")),
        Err(TraceError::NotPcap)
    ));
    assert!(matches!(
        analyse_bytes(&corpus("truncated-header.pcap")),
        Err(TraceError::TruncatedHeader)
    ));

    // A record claiming 2 GiB in a small file: a corrupt length, not a
    // capture cut short.
    match analyse_bytes(&corpus("huge-caplen.pcap")) {
        Err(TraceError::Corrupt(c)) => {
            assert_eq!((c.offset, c.after_packets), (24, 0));
            assert!(matches!(
                c.what,
                Corruption::Length {
                    claimed: 0x7fff_ffff,
                    ..
                }
            ));
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }

    // Two zero-length frames and one whose captured length exceeds its
    // claimed original length.
    let lying = analyse_bytes(&corpus("zero-and-lying-lengths.pcap")).unwrap();
    assert_eq!(lying.packets, 3);
    assert_eq!(lying.non_ip_packets, 2);
    assert_eq!(lying.inconsistent_lengths, 1);
    assert_eq!(lying.ip_packets, 1);

    let usb = analyse_bytes(&corpus("unknown-linktype.pcap")).unwrap();
    assert_eq!(usb.packets, 14);
    assert_eq!(usb.non_ip_packets, 14);
    assert_eq!(usb.flows, 0);

    // `tcpdump -i any` (Linux cooked captures v1 and v2) on loopback: 5 UDP
    // datagrams over IPv4, 5 over IPv6, a TCP connection (10 segments).
    for name in ["tcpdump-any-sll.pcap", "tcpdump-any-sll2.pcap"] {
        let any = analyse_bytes(&corpus(name)).unwrap();
        assert_eq!((any.packets, any.ip_packets), (20, 20), "{name}");
        assert_eq!(any.flows, 4, "{name}");
    }

    let arp = analyse_bytes(&corpus("big-endian-arp.pcap")).unwrap();
    assert_eq!((arp.packets, arp.non_ip_packets), (1, 1));

    let ng = analyse_bytes(&corpus("pcapng-unknown-interface.pcapng")).unwrap();
    assert_eq!((ng.packets, ng.skipped_records), (1, 1));

    // An enhanced packet block claiming 4 GiB.
    assert!(matches!(
        analyse_bytes(&corpus("pcapng-lying-block-length.pcapng")),
        Err(TraceError::Corrupt(CorruptRecord {
            offset: 48,
            after_packets: 0,
            ..
        }))
    ));
    // Kept partial: nothing read, everything from the block on skipped.
    let lying = corpus("pcapng-lying-block-length.pcapng");
    let mut reader = TraceReader::from_bytes(&lying).unwrap().keep_partial(true);
    let ng = analyse(&mut reader, StatsConfig::default()).unwrap();
    assert_eq!(ng.packets, 0);
    assert_eq!(ng.skipped_bytes, 148 - 48);
    assert!(!ng.truncated_tail);
}

/// `valid.pcap`'s header and records, the third record's length replaced.
fn with_corrupt_third_length(caplen: u32) -> (Vec<u8>, u64) {
    let mut bytes = corpus("valid.pcap");
    let mut at = 24;
    for _ in 0..2 {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + len;
    }
    bytes[at + 8..at + 12].copy_from_slice(&caplen.to_le_bytes());
    (bytes, at as u64)
}

#[test]
fn a_corrupt_length_in_the_middle_is_an_error_unless_kept_partial() {
    for caplen in [0x4141_4141, 300_000] {
        let (bytes, offset) = with_corrupt_third_length(caplen);
        match analyse_bytes(&bytes) {
            Err(TraceError::Corrupt(c)) => {
                assert_eq!((c.offset, c.after_packets), (offset, 2));
                let message = TraceError::Corrupt(c).to_string();
                assert!(
                    message.contains(&format!("byte {offset}"))
                        && message.contains("after packet 2")
                        && message.contains(&caplen.to_string()),
                    "{message}"
                );
            }
            other => panic!("caplen {caplen}: expected a corrupt record, got {other:?}"),
        }
        let mut reader = TraceReader::from_bytes(&bytes).unwrap().keep_partial(true);
        let r = analyse(&mut reader, StatsConfig::default()).unwrap();
        assert_eq!(r.packets, 2);
        assert_eq!(r.skipped_bytes, bytes.len() as u64 - offset);
        assert_eq!(r.corrupt_record.map(|c| c.offset), Some(offset));
        assert!(!r.truncated_tail);
        // The reader stays at its end.
        assert!(reader.next_record().unwrap().is_none());
    }
}

#[test]
fn a_last_record_cut_short_is_left_out_and_counted() {
    let valid = corpus("valid.pcap");
    let cut = &valid[..valid.len() - 10];
    let r = analyse_bytes(cut).unwrap();
    assert_eq!(r.packets, 13);
    assert!(r.truncated_tail);
    assert!(r.corrupt_record.is_none());
    let last_len = {
        let mut at = 24;
        let mut len = 0;
        while at < valid.len() {
            len = 16 + u32::from_le_bytes(valid[at + 8..at + 12].try_into().unwrap()) as u64;
            at += len as usize;
        }
        len
    };
    assert_eq!(r.skipped_bytes, last_len - 10);
}

#[test]
fn a_record_larger_than_the_limit_is_an_error_not_an_allocation() {
    // A record claiming 1 GiB followed by 40 MiB of data: the reader stops
    // at its 16 MiB limit instead of buffering the claim.
    let mut bytes = corpus("valid.pcap")[..24].to_vec();
    bytes.extend_from_slice(&1_700_000_000u32.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&(1u32 << 30).to_le_bytes());
    bytes.extend_from_slice(&(1u32 << 30).to_le_bytes());
    bytes.resize(bytes.len() + (40 << 20), 0);
    match analyse_bytes(&bytes) {
        Err(TraceError::Corrupt(CorruptRecord {
            what: Corruption::Length { claimed, limit },
            ..
        })) => {
            assert_eq!(claimed, 1 << 30);
            assert_eq!(limit, rsspp_trace::read::MAX_PACKET_BYTES);
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }
}

fn check(bytes: &[u8]) {
    // Any outcome but a panic is fine; a report must be self-consistent.
    if let Ok(r) = analyse_bytes(bytes) {
        assert_eq!(
            r.packets,
            r.ip_packets + r.non_ip_packets + r.malformed_packets
        );
        assert!(r.flows <= r.ip_packets);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        check(&bytes);
    }

    #[test]
    fn arbitrary_records_after_a_valid_header_never_panic(
        nanos in any::<bool>(),
        linktype in prop_oneof![Just(1u32), Just(101), Just(113), Just(228), Just(229), Just(276), any::<u32>()],
        body in proptest::collection::vec(any::<u8>(), 0..800),
    ) {
        let mut bytes = corpus("valid.pcap")[..24].to_vec();
        if nanos {
            bytes[..4].copy_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        }
        bytes[20..24].copy_from_slice(&linktype.to_le_bytes());
        bytes.extend_from_slice(&body);
        check(&bytes);
    }

    #[test]
    fn mutated_captures_never_panic(
        file in prop_oneof![
            Just("valid.pcap"),
            Just("pcapng-unknown-interface.pcapng"),
            Just("big-endian-arp.pcap"),
        ],
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = corpus(file);
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let keep = cut.index(bytes.len() + 1);
        bytes.truncate(keep.max(bytes.len() / 2));
        check(&bytes);
    }

    #[test]
    fn arbitrary_frames_parse_without_panicking(
        frame in proptest::collection::vec(any::<u8>(), 0..200),
        wire in any::<u32>(),
    ) {
        for link in [1, 101, 113, 228, 229, 276] {
            let r = rsspp_trace::parse::parse_frame(
                rsspp_trace::parse::LinkType::from_pcap(link), &frame, 0, wire);
            prop_assert_eq!(r.captured_len as usize, frame.len());
        }
    }
}

#[test]
fn a_wild_timestamp_does_not_allocate_every_second_in_between() {
    // Two packets 4 billion seconds apart.
    let valid = corpus("valid.pcap");
    let first_len = u32::from_le_bytes(valid[32..36].try_into().unwrap()) as usize;
    let record = &valid[24..40 + first_len];
    let mut bytes = valid[..24].to_vec();
    bytes.extend_from_slice(record);
    let mut late = record.to_vec();
    late[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&late);
    let mut early = record.to_vec();
    early[0..4].copy_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&early);
    let r = analyse_bytes(&bytes).unwrap();
    assert_eq!(r.packets, 3);
    assert_eq!(r.out_of_order_timestamps, 1);
    assert!(r.active_flows_per_s.series.is_empty());
    assert_eq!(r.active_flows_per_s.max, 1);
    assert_eq!(r.active_flows_per_s.min, 0);
}
