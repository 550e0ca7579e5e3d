//! Compiles the XDP programs (C, clang) and generates their Rust skeletons.

include!("../bpf_build.rs");

fn main() {
    // v3: the atomic exchange and fetch-and-add of the order-preserving
    // moves (Linux 5.12+).
    build_bpf(
        &[("src/bpf/rsspp.bpf.c", "rsspp.skel.rs")],
        &["-mcpu=v3"],
        None,
    );
}
