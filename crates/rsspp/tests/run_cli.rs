//! `rsspp run`'s refusals, through the real binary: a clear error, exit
//! code 1, and the interface exactly as it was. The ones that touch an
//! interface run in a network namespace made for the test (root; CI is
//! root).

#[path = "../../rsspp-linux/tests/common/netns.rs"]
#[allow(dead_code)]
mod netns;

#[path = "../../rsspp-linux/tests/common/foreign.rs"]
#[allow(dead_code)]
mod foreign;

use std::process::{Command, Output};

use netns::Netns;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping: `rsspp run` tests need root (CI runs as root)");
    }
    root
}

/// `rsspp run ARGS` in `ns` (or here), with no metrics server unless asked.
fn run(ns: Option<&Netns>, args: &[&str]) -> Output {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns.name, RSSPP]);
            c
        }
        None => Command::new(RSSPP),
    };
    cmd.arg("run").args(args);
    if !args.iter().any(|a| a.starts_with("--metrics-addr")) {
        cmd.arg("--no-metrics");
    }
    cmd.output().unwrap()
}

/// Exit code 1 and `message` on stderr, no panic.
fn refused(out: &Output, message: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains(message), "expected {message:?} in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_options_are_refused_before_anything_is_touched() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--iface", "lo", "--cpus", "1-0"],
            "invalid CPU list \"1-0\"",
        ),
        (
            &["--iface", "lo", "--cpus", "0,4000"],
            "CPU 4000 is not online",
        ),
        (
            &["--iface", "lo", "--interval-ms", "0"],
            "--interval-ms must be between 1 ms and 10 s, got 0",
        ),
        (
            &["--iface", "lo", "--max-interval-ms", "50"],
            "--max-interval-ms must be between",
        ),
        (
            &["--iface", "lo", "--target-load", "2"],
            "--target-load must be in (0, 1]",
        ),
        (
            &["--iface", "lo", "--tolerance", "0.7"],
            "--tolerance must be in [0, 0.5)",
        ),
        (
            &["--iface", "lo", "--duration", "-1"],
            "--duration must be a positive number",
        ),
        (
            &["--iface", "lo", "--min-improvement", "1.5"],
            "--min-improvement must be in [0, 1), got 1.5",
        ),
        (
            &["--iface", "lo", "--min-dwell-ms", "7200000"],
            "--min-dwell-ms must be at most an hour, got 7200000",
        ),
        (
            &[
                "--iface",
                "lo",
                "--mode",
                "hardware",
                "--load-source",
                "steered",
            ],
            "only software mode has",
        ),
        (
            &["--iface", "lo", "--context", "1"],
            "--context balances one of the NIC's RSS contexts: it needs --mode hardware",
        ),
        (
            &["--iface", "lo", "--mode", "hardware", "--context", "0"],
            "--context 0 is the NIC's main table",
        ),
        (
            &["--iface", "lo", "--reta-size", "1"],
            "--reta-size must be a power of two from 64 to 65536, got 1",
        ),
    ];
    for (args, message) in cases {
        refused(&run(None, args), message);
    }
    let out = Command::new(RSSPP)
        .args(["run", "--iface", "lo", "--metrics-addr", "nope"])
        .output()
        .unwrap();
    refused(&out, "--metrics-addr \"nope\" is not an address:port");
}

#[test]
fn a_refused_native_attach_names_the_flag_for_skb_mode() {
    if !is_root() {
        return;
    }
    // The loopback device has no native XDP: the advice names the flag.
    refused(
        &run(None, &["--iface", "lo", "--duration", "0.2"]),
        "the driver may lack XDP support: try --xdp-mode skb",
    );
}

#[test]
fn an_unknown_interface_is_named() {
    if !is_root() {
        return;
    }
    // In the words of every command (nic, nf, detach): one wording.
    let said = "rsspp: error: rsspp-nosuch0: no such interface in this network namespace\n";
    refused(&run(None, &["--iface", "rsspp-nosuch0"]), said);
    refused(
        &run(None, &["--iface", "rsspp-nosuch0", "--mode", "hardware"]),
        said,
    );
    let out = Command::new(RSSPP)
        .args(["detach", "--iface", "rsspp-nosuch0"])
        .output()
        .unwrap();
    refused(&out, said);
}

#[test]
fn a_busy_metrics_port_is_refused_before_attaching() {
    if !is_root() {
        return;
    }
    let ns = Netns::with_veth("run-port");
    ns.ip(&["link", "set", "lo", "up"]);
    // Something else serves the port in the namespace.
    let mut holder = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c"])
        .arg("import socket,time; s=socket.socket(); s.bind(('127.0.0.1',19465)); s.listen(); print('ok',flush=True); time.sleep(30)")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let out = run(
        Some(&ns),
        &[
            "--iface",
            "veth1",
            "--metrics-addr",
            "127.0.0.1:19465",
            "--duration",
            "1",
        ],
    );
    let _ = holder.kill();
    let _ = holder.wait();
    refused(&out, "127.0.0.1:19465");
    assert_eq!(ns.xdp_of("veth1"), None, "nothing attached");
}

#[test]
fn another_xdp_program_is_kept_unless_forced() {
    if !is_root() {
        return;
    }
    let ns = Netns::with_veth("run-force");
    // Another tool's program, attached through netlink.
    let theirs = ns.run(|| foreign::attach("veth1", false));
    let kept = ns.xdp_of("veth1").expect("attached");
    assert_eq!(kept.1, theirs);

    // A daemon refuses to replace it, names it, and leaves it in place.
    let out = run(Some(&ns), &["--iface", "veth1", "--duration", "0.3"]);
    refused(&out, "another XDP program");
    refused(&out, foreign::NAME);
    refused(&out, "is attached; --force replaces it");
    assert_eq!(ns.xdp_of("veth1"), Some(kept.clone()));

    // --force replaces it while running and puts it back on exit.
    let out = run(
        Some(&ns),
        &["--iface", "veth1", "--duration", "0.3", "--force"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ns.xdp_of("veth1"), Some(kept));
}

#[test]
fn hardware_mode_needs_a_writable_table_and_leaves_the_interface_alone() {
    if !is_root() {
        return;
    }
    let ns = Netns::with_veth("run-hw");
    let out = run(
        Some(&ns),
        &[
            "--iface",
            "veth1",
            "--mode",
            "hardware",
            "--duration",
            "0.3",
        ],
    );
    refused(&out, "veth1");
    assert_eq!(ns.xdp_of("veth1"), None, "nothing attached");
}

#[test]
fn without_privileges_the_error_says_so() {
    if !is_root() {
        return;
    }
    // Drop root for the daemon only.
    let out = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", RSSPP])
        .args(["run", "--iface", "lo", "--no-metrics", "--duration", "0.3"])
        .output()
        .expect("setpriv (util-linux)");
    refused(&out, "root");
    let link = Command::new("ip")
        .args(["-d", "link", "show", "lo"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&link.stdout).contains("prog/xdp"));
}

/// `rsspp run --config FILE`: the file's keys are the flags, the typed
/// flags override them, an unknown key is named. Checked before anything
/// is touched, so no root is needed.
#[test]
fn a_configuration_file_sets_the_options_and_flags_override_it() {
    let dir = std::env::temp_dir().join(format!("rsspp-run-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rsspp.toml");
    let config = file.to_str().unwrap();
    std::fs::write(
        &file,
        "# the daemon\niface = \"lo\"\nreta_size = 1\nno-metrics = true\n",
    )
    .unwrap();
    let run = |args: &[&str]| Command::new(RSSPP).arg("run").args(args).output().unwrap();
    // The file alone: its --iface satisfies clap, its --reta-size is checked.
    refused(
        &run(&["--config", config]),
        "--reta-size must be a power of two from 64 to 65536, got 1",
    );
    // A typed flag overrides the file's: the next check is reached.
    refused(
        &run(&[
            "--config",
            config,
            "--reta-size",
            "64",
            "--interval-ms",
            "0",
        ]),
        "--interval-ms must be between 1 ms and 10 s, got 0",
    );
    refused(
        &run(&[
            &format!("--config={config}"),
            "--reta-size=64",
            "--interval-ms=0",
        ]),
        "--interval-ms must be between 1 ms and 10 s, got 0",
    );
    std::fs::write(&file, "iface = \"lo\"\ncpuz = \"0-3\"\n").unwrap();
    let out = run(&["--config", config]);
    refused(
        &out,
        &format!("rsspp: error: {config}: unknown key \"cpuz\" (rsspp run has no --cpuz)\n"),
    );
    std::fs::write(&file, "iface = \"lo\"\ninterval_ms = \n").unwrap();
    refused(&run(&["--config", config]), &format!("{config}: line 2: "));
    refused(
        &run(&["--config", "/nonexistent/rsspp.toml"]),
        "/nonexistent/rsspp.toml: No such file or directory",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
