//! Compiles the listener-selecting program (C, clang) and generates its
//! Rust skeleton. The Toeplitz code is rsspp-linux's `toeplitz.h`, included
//! from there.

use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

const SOURCE: &str = "src/bpf/select.bpf.c";
const SHARED: &str = "../rsspp-linux/src/bpf";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut args = vec![
        "-O2".to_string(),
        "-Wall".into(),
        "-Werror".into(),
        format!("-I{SHARED}"),
    ];
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    if Path::new(&multiarch).is_dir() {
        args.push(format!("-I{multiarch}"));
    }
    SkeletonBuilder::new()
        .source(SOURCE)
        .clang_args(args)
        .build_and_generate(out.join("select.skel.rs"))
        .unwrap_or_else(|e| {
            panic!("building {SOURCE} (needs clang, libelf-dev, linux-libc-dev): {e:#}")
        });
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed={SHARED}/toeplitz.h");
    println!("cargo:rerun-if-changed={SHARED}/parse.h");
}
