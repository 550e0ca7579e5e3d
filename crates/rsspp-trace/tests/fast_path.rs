//! The direct IPv4 decoder and etherparse's general path give the same
//! record for every frame, including mutated and truncated ones.

use etherparse::PacketBuilder;
use proptest::prelude::*;
use rsspp_trace::parse::{parse_frame, parse_frame_general, LinkType};

fn frame(vlans: u8, tcp: bool, payload: usize, ports: (u16, u16), seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let eth = PacketBuilder::ethernet2([1; 6], [2; 6]);
    let payload = vec![0xab; payload];
    macro_rules! finish {
        ($ip:expr) => {
            if tcp {
                $ip.tcp(ports.0, ports.1, seq, 1000)
                    .ack(7)
                    .write(&mut out, &payload)
                    .unwrap()
            } else {
                $ip.udp(ports.0, ports.1).write(&mut out, &payload).unwrap()
            }
        };
    }
    match vlans {
        0 => finish!(eth.ipv4([10, 1, 2, 3], [192, 0, 2, 9], 64)),
        1 => {
            finish!(eth
                .single_vlan(5.try_into().unwrap())
                .ipv4([10, 1, 2, 3], [192, 0, 2, 9], 64))
        }
        _ => finish!(eth
            .double_vlan(6.try_into().unwrap(), 7.try_into().unwrap())
            .ipv4([10, 1, 2, 3], [192, 0, 2, 9], 64)),
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn fast_and_general_paths_agree(
        vlans in 0u8..3,
        tcp in any::<bool>(),
        payload in 0usize..64,
        ports in any::<(u16, u16)>(),
        seq in any::<u32>(),
        edits in proptest::collection::vec((0usize..80, any::<u8>()), 0..4),
        cut in 0usize..140,
    ) {
        let mut f = frame(vlans, tcp, payload, ports, seq);
        for (at, value) in edits {
            if at < f.len() {
                f[at] = value;
            }
        }
        f.truncate(cut.max(1));
        let fast = parse_frame(LinkType::Ethernet, &f, 11, 1500);
        let general = parse_frame_general(LinkType::Ethernet, &f, 11, 1500);
        prop_assert_eq!(fast, general, "frame {:02x?}", f);
    }
}
