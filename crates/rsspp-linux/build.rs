//! Compiles the XDP programs (C, clang) and generates their Rust skeletons.

use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

const SOURCE: &str = "src/bpf/rsspp.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // v3: the atomic exchange and fetch-and-add of the order-preserving
    // moves (Linux 5.12+).
    let mut args = vec![
        "-O2".to_string(),
        "-Wall".into(),
        "-Werror".into(),
        "-mcpu=v3".into(),
    ];
    // <linux/types.h> includes <asm/types.h>, which Debian keeps under the
    // multiarch directory that `clang -target bpf` does not search.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    if Path::new(&multiarch).is_dir() {
        args.push(format!("-I{multiarch}"));
    }
    SkeletonBuilder::new()
        .source(SOURCE)
        .clang_args(args)
        .build_and_generate(out.join("rsspp.skel.rs"))
        .unwrap_or_else(|e| {
            panic!("building {SOURCE} (needs clang, libelf-dev, linux-libc-dev): {e:#}")
        });
    println!("cargo:rerun-if-changed=src/bpf");
}
