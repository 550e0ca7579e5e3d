//! Compiles the listener-selecting program (C, clang) and generates its
//! Rust skeleton. The Toeplitz code is rsspp-linux's `toeplitz.h`, included
//! from there.

include!("../bpf_build.rs");

fn main() {
    build_bpf(
        &[("src/bpf/select.bpf.c", "select.skel.rs")],
        &[],
        Some("../rsspp-linux/src/bpf"),
    );
}
