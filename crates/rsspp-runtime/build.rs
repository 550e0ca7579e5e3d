//! Compiles the fanout program and the afxdp backend's XDP program (C,
//! clang) and generates their Rust skeletons. The Toeplitz code is
//! rsspp-linux's `toeplitz.h`, included from there.

use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

const SOURCES: [(&str, &str); 2] = [
    ("src/bpf/fanout.bpf.c", "fanout.skel.rs"),
    ("src/bpf/xsk.bpf.c", "xsk.skel.rs"),
];
const SHARED: &str = "../rsspp-linux/src/bpf";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // v3: the fetch-and-add whose old value the program reads.
    let mut args = vec![
        "-O2".to_string(),
        "-Wall".into(),
        "-Werror".into(),
        "-mcpu=v3".into(),
        format!("-I{SHARED}"),
    ];
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    if Path::new(&multiarch).is_dir() {
        args.push(format!("-I{multiarch}"));
    }
    for (source, skel) in SOURCES {
        SkeletonBuilder::new()
            .source(source)
            .clang_args(args.clone())
            .build_and_generate(out.join(skel))
            .unwrap_or_else(|e| {
                panic!("building {source} (needs clang, libelf-dev, linux-libc-dev): {e:#}")
            });
    }
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed={SHARED}/toeplitz.h");
    println!("cargo:rerun-if-changed={SHARED}/parse.h");
}
