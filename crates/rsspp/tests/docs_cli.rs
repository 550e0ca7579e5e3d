//! `rsspp manpages` and `rsspp completions`: a page for every subcommand
//! the binary has, completions a shell accepts, clear errors.

use std::process::Command;

const RSSPP: &str = env!("CARGO_BIN_EXE_rsspp");

/// The subcommands `rsspp --help` lists.
fn subcommands() -> Vec<String> {
    let out = Command::new(RSSPP).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

/// The help texts speak of options and behaviour, not of the code: no
/// Rust path (`IndirectionTable::equal_over`), no remark about the machine
/// the code was written on.
#[test]
fn help_texts_do_not_mention_internals() {
    let dir = std::env::temp_dir().join(format!("rsspp-man-internals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(RSSPP)
        .arg("manpages")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut pages = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let page = std::fs::read_to_string(&path).unwrap();
        pages += 1;
        for said in ["this machine", "shared and noisy", "rsspp_", "crate"] {
            assert!(!page.contains(said), "{}: {said:?}", path.display());
        }
        // A Rust path: a capitalised name, `::`, a name (an IPv6 address
        // such as ::1 is not one).
        for (i, _) in page.match_indices("::") {
            let before = page[..i]
                .rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .next()
                .unwrap_or("");
            let after = page[i + 2..].chars().next().unwrap_or(' ');
            assert!(
                !(before.starts_with(|c: char| c.is_ascii_uppercase())
                    && after.is_ascii_alphabetic()),
                "{}: {before}::…",
                path.display()
            );
        }
    }
    assert!(pages >= 12, "{pages} pages");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_man_page_for_every_subcommand() {
    let dir = std::env::temp_dir().join(format!("rsspp-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(RSSPP)
        .arg("manpages")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let subs = subcommands();
    assert!(subs.len() >= 12, "{subs:?}");
    for sub in subs
        .iter()
        .chain(["nic-show".to_string(), "trace-gen".to_string()].iter())
    {
        let page = std::fs::read_to_string(dir.join(format!("rsspp-{sub}.1")))
            .unwrap_or_else(|e| panic!("rsspp-{sub}.1: {e}"));
        assert!(
            page.starts_with(".ie") || page.contains(".TH"),
            "{sub}: {page}"
        );
    }
    // The daemon's page names its options, as `rsspp run --help` does.
    let run = std::fs::read_to_string(dir.join("rsspp-run.1")).unwrap();
    for flag in ["iface", "cpus", "moves", "context", "keep"] {
        assert!(
            run.contains(&format!("\\-\\-{flag}")),
            "--{flag} in rsspp-run.1"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    // A directory that cannot be made: one line, exit 1.
    let out = Command::new(RSSPP)
        .args(["manpages", "/proc/rsspp-no/man1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("rsspp: error: /proc/rsspp-no/man1: "),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn bash_accepts_the_completions() {
    let out = Command::new(RSSPP)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let script = String::from_utf8(out.stdout).unwrap();
    // Sourced by bash, the script registers a completion for rsspp that
    // offers the subcommands.
    let check = format!(
        "{script}\ncomplete -p rsspp >/dev/null || exit 1\n\
         COMP_WORDS=(rsspp ru); COMP_CWORD=1; COMP_LINE='rsspp ru'; COMP_POINT=8\n\
         _rsspp rsspp ru rsspp && printf '%s\\n' \"${{COMPREPLY[@]}}\""
    );
    let out = Command::new("bash").args(["-c", &check]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.lines().any(|l| l == "run"), "{text}");
    for shell in ["zsh", "fish"] {
        let out = Command::new(RSSPP)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
    let out = Command::new(RSSPP)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap refuses an unknown shell");
}
