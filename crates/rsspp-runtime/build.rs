//! Compiles the fanout program and the afxdp backend's XDP programs (C,
//! clang) and generates their Rust skeletons. The Toeplitz code is
//! rsspp-linux's `toeplitz.h`, included from there.

include!("../bpf_build.rs");

fn main() {
    // v3: the fetch-and-add whose old value the programs read.
    build_bpf(
        &[
            ("src/bpf/fanout.bpf.c", "fanout.skel.rs"),
            ("src/bpf/xsk.bpf.c", "xsk.skel.rs"),
            ("src/bpf/xsk_nic.bpf.c", "xsk_nic.skel.rs"),
        ],
        &["-mcpu=v3"],
        Some("../rsspp-linux/src/bpf"),
    );
}
