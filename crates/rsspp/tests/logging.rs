//! Logs written to a pipe or a file are plain text.

use assert_cmd::Command;

#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    // `rsspp demo` logs each applied plan at info level; stderr here is a
    // pipe, as with a service manager or `2>file`.
    let out = Command::cargo_bin("rsspp")
        .unwrap()
        .env("RUST_LOG", "info")
        .args(["demo", "--rounds", "2"])
        .assert()
        .success()
        .get_output()
        .stderr
        .clone();
    let stderr = String::from_utf8(out).unwrap();
    assert!(stderr.contains("plan applied"), "no log line: {stderr:?}");
    assert!(!stderr.contains('\x1b'), "colour codes in {stderr:?}");
}
