//! The published statistics of the campus trace (RSS++ evaluation), the
//! calibration target of the `campus` and `campus4` presets. The same
//! figures as `shared/data/campus-trace-stats.json`.

/// Published campus-trace statistics.
#[derive(Debug, Clone)]
pub struct CampusReference {
    /// Length of the replay, seconds.
    pub duration_s: f64,
    /// Packets per second.
    pub pps: f64,
    /// Gigabits per second.
    pub gbps: f64,
    /// Mean frame size, bytes (Ethernet header included).
    pub avg_packet_bytes: f64,
    /// Directional 5-tuple flows in the whole trace.
    pub flows: u64,
    /// Mean, min and max active flows per second.
    pub active_flows_per_s: (f64, f64, f64),
    /// New flows per second at the start and at the end.
    pub new_flows_start: f64,
    /// See `new_flows_start`.
    pub new_flows_end: f64,
    /// Packets of the largest flow.
    pub largest_flow_packets: u64,
    /// Campus #4 packet rate.
    pub campus4_pps: f64,
    /// Campus #4 mean active flows per second.
    pub campus4_active_flows_per_s: f64,
    /// Campus #4 new flows per second at the start.
    pub campus4_new_flows_start: f64,
    /// Campus #4 new flows per second at the end.
    pub campus4_new_flows_end: f64,
    /// Flow-size CDF (packets, fraction of flows), whole flows.
    pub flow_size_cdf_whole_flows: Vec<(u64, f64)>,
    /// Flow-size CDF counted per 1-second window.
    pub flow_size_cdf_per_1s_window: Vec<(u64, f64)>,
    /// Share of packets in flows of at most n packets.
    pub packet_share_by_flow_size: Vec<(u64, f64)>,
    /// Frame-size CDF (bytes, fraction of packets).
    pub frame_size_cdf: Vec<(u64, f64)>,
}

/// The published figures.
pub fn campus_reference() -> CampusReference {
    CampusReference {
        duration_s: 60.0,
        pps: 507_000.0,
        gbps: 4.20,
        avg_packet_bytes: 1011.2,
        flows: 808_321,
        active_flows_per_s: (18_987.0, 17_200.0, 20_300.0),
        new_flows_start: 13_400.0,
        new_flows_end: 7_200.0,
        largest_flow_packets: 4_425_709,
        campus4_pps: 1_870_000.0,
        campus4_active_flows_per_s: 77_000.0,
        campus4_new_flows_start: 59_000.0,
        campus4_new_flows_end: 26_000.0,
        flow_size_cdf_whole_flows: vec![
            (1, 0.519),
            (2, 0.621),
            (3, 0.671),
            (4, 0.707),
            (5, 0.734),
            (8, 0.809),
            (9, 0.834),
            (10, 0.859),
            (12, 0.891),
            (15, 0.920),
            (20, 0.944),
            (23, 0.951),
            (30, 0.963),
            (36, 0.969),
            (50, 0.976),
            (98, 0.985),
            (184, 0.990),
            (397, 0.994),
            (1127, 0.997),
            (4854, 0.999),
            (4_425_709, 1.0),
        ],
        flow_size_cdf_per_1s_window: vec![
            (1, 0.538),
            (2, 0.670),
            (5, 0.798),
            (10, 0.888),
            (20, 0.934),
            (31, 0.950),
            (61, 0.968),
            (239, 0.988),
            (1510, 0.998),
            (83_176, 1.0),
        ],
        packet_share_by_flow_size: vec![
            (1, 0.011),
            (10, 0.044),
            (30, 0.078),
            (184, 0.114),
            (4854, 0.270),
        ],
        frame_size_cdf: vec![
            (64, 0.075),
            (66, 0.203),
            (102, 0.250),
            (256, 0.300),
            (1306, 0.40),
            (1474, 0.50),
            (1514, 1.0),
        ],
    }
}
