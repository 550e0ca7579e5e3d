//! `rsspp serve`'s option checks: bad input is one clear line and exit 1,
//! before anything is bound or loaded (no root needed).

use assert_cmd::Command;
use predicates::prelude::*;

fn serve(args: &[&str]) -> assert_cmd::assert::Assert {
    Command::cargo_bin("rsspp")
        .unwrap()
        .arg("serve")
        .args(args)
        .assert()
}

#[test]
fn bad_input_is_one_line_and_exit_1() {
    for (args, says) in [
        (
            vec!["--listen", "nonsense", "--cpus", "0"],
            "--listen must be an IPv4 ADDR:PORT",
        ),
        (
            vec![
                "--listen",
                "127.0.0.1:8080",
                "--cpus",
                "0",
                "--table-size",
                "100",
            ],
            "--table-size must be a power of two",
        ),
        (
            vec![
                "--listen",
                "127.0.0.1:8080",
                "--cpus",
                "0",
                "--slow",
                "7:100",
            ],
            "--slow must be CPU:US",
        ),
        (
            vec!["--listen", "127.0.0.1:8080", "--cpus", "0", "--duration=0"],
            "--duration must be a positive number",
        ),
        (
            vec![
                "--listen",
                "127.0.0.1:8080",
                "--cpus",
                "0",
                "--affinity",
                "off",
                "--iface",
                "lo",
            ],
            "--iface selects the daemon's table",
        ),
    ] {
        let out = serve(&args).code(1).stdout("");
        let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // An offline or absent CPU.
    serve(&["--listen", "127.0.0.1:8080", "--cpus", "4095"])
        .code(1)
        .stderr(predicate::str::contains("4095"));
}
