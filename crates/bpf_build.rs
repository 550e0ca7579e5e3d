// Shared by the build scripts of rsspp-linux, rsspp-runtime and
// rsspp-accept (each `include!`s it): compiles BPF C programs with clang
// through libbpf-cargo and generates their Rust skeletons into OUT_DIR.

/// Compiles each `(source, skeleton file)` with `-O2 -Wall -Werror`, the
/// `extra` clang arguments and, when given, `-I include` (rsspp-linux's
/// `src/bpf`, whose `toeplitz.h` and `parse.h` the others use).
fn build_bpf(sources: &[(&str, &str)], extra: &[&str], include: Option<&str>) {
    use std::env;
    use std::path::{Path, PathBuf};

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut args: Vec<String> = ["-O2", "-Wall", "-Werror"]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
    if let Some(dir) = include {
        args.push(format!("-I{dir}"));
    }
    // <linux/types.h> includes <asm/types.h>, which Debian keeps under the
    // multiarch directory that `clang -target bpf` does not search.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    if Path::new(&multiarch).is_dir() {
        args.push(format!("-I{multiarch}"));
    }
    for (source, skeleton) in sources {
        libbpf_cargo::SkeletonBuilder::new()
            .source(source)
            .clang_args(args.clone())
            .build_and_generate(out.join(skeleton))
            .unwrap_or_else(|e| {
                panic!("building {source} (needs clang, libelf-dev, linux-libc-dev): {e:#}")
            });
    }
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed=../bpf_build.rs");
    if let Some(dir) = include {
        println!("cargo:rerun-if-changed={dir}/toeplitz.h");
        println!("cargo:rerun-if-changed={dir}/parse.h");
    }
}
