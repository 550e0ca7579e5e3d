//! `rsspp run --config FILE`: the daemon's options in a TOML file.
//!
//! Each key is an option of `rsspp run`, named as its long flag without the
//! dashes (`interval_ms` or `interval-ms`), with the value the flag takes:
//! a string, a number, `true` for a switch, a list for a comma-separated
//! value. The file's options go on the command line before the ones typed,
//! which override them. A key that is not an option is refused, named.

use std::ffi::OsString;
use std::path::Path;

use clap::{ArgAction, Args, Command};

use crate::cmd::run::RunArgs;
use crate::error::CliError;

/// The command line with `rsspp run --config FILE`'s options spliced in
/// after `run`, or as it is when there is no `--config` for `run`.
pub fn expand(argv: Vec<OsString>) -> Result<Vec<OsString>, CliError> {
    // The subcommand: the first word after the program that is not a
    // global flag (the global flags take no value).
    let Some(run) = argv
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))
        .map(|i| i + 1)
    else {
        return Ok(argv);
    };
    if argv[run] != "run" {
        return Ok(argv);
    }
    let mut path = None;
    let mut i = run + 1;
    while i < argv.len() {
        let a = argv[i].to_string_lossy();
        if a == "--" {
            break;
        }
        if a == "--config" {
            path = argv.get(i + 1).cloned();
            if path.is_none() {
                // clap says what is missing.
                return Ok(argv);
            }
            i += 1;
        } else if let Some(value) = a.strip_prefix("--config=") {
            path = Some(OsString::from(value));
        }
        i += 1;
    }
    let Some(path) = path else {
        return Ok(argv);
    };
    let text = std::fs::read_to_string(&path).map_err(|source| CliError::Io {
        path: Path::new(&path).display().to_string(),
        source,
    })?;
    let from_file = options(&Path::new(&path).display().to_string(), &text)?;
    let mut out = argv[..=run].to_vec();
    out.extend(from_file.into_iter().map(OsString::from));
    out.extend(argv[run + 1..].iter().cloned());
    Ok(out)
}

/// The options a configuration file's `text` sets, as `--flag=value` words
/// (or `--flag` for a switch).
pub fn options(origin: &str, text: &str) -> Result<Vec<String>, CliError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        CliError::Invalid(match line {
            Some(line) => format!("{origin}: line {line}: {}", e.message().trim_end()),
            None => format!("{origin}: {}", e.message().trim_end()),
        })
    })?;
    let command = RunArgs::augment_args(Command::new("run"));
    let mut words = Vec::new();
    for (key, value) in &table {
        let flag = key.replace('_', "-");
        let bad = |why: &str| CliError::Invalid(format!("{origin}: key {key:?}: {why}"));
        if flag == "config" {
            return Err(bad("a configuration file cannot name another"));
        }
        let Some(arg) = command
            .get_arguments()
            .find(|a| a.get_long() == Some(flag.as_str()))
        else {
            return Err(CliError::Invalid(format!(
                "{origin}: unknown key {key:?} (rsspp run has no --{flag})"
            )));
        };
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        let text = match value {
            toml::Value::Boolean(on) if switch => {
                if *on {
                    words.push(format!("--{flag}"));
                }
                continue;
            }
            _ if switch => return Err(bad("a switch: true or false")),
            toml::Value::Boolean(_) => {
                return Err(bad(&format!(
                    "takes a value (as --{flag} does), not true or false"
                )))
            }
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Array(items) => {
                let mut parts = Vec::with_capacity(items.len());
                for item in items {
                    parts.push(match item {
                        toml::Value::String(s) => s.clone(),
                        toml::Value::Integer(n) => n.to_string(),
                        toml::Value::Float(x) => x.to_string(),
                        _ => return Err(bad("a list of strings or numbers")),
                    });
                }
                parts.join(",")
            }
            toml::Value::Datetime(_) | toml::Value::Table(_) => {
                return Err(bad("a string, a number, true/false or a list"))
            }
        };
        words.push(format!("--{flag}={text}"));
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn keys_become_flags() {
        let words = options(
            "f.toml",
            "iface = \"eth0\"\ninterval_ms = 50\ntarget-load = 0.7\nautoscale = true\n\
             keep = false\ncpus = [0, 2, 3]\nxdp_mode = \"skb\"\n",
        )
        .unwrap();
        let mut sorted = words.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            [
                "--autoscale",
                "--cpus=0,2,3",
                "--iface=eth0",
                "--interval-ms=50",
                "--target-load=0.7",
                "--xdp-mode=skb",
            ]
        );
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        let err = |text: &str| options("f.toml", text).unwrap_err().to_string();
        assert_eq!(
            err("cpuz = \"0-3\""),
            "f.toml: unknown key \"cpuz\" (rsspp run has no --cpuz)"
        );
        assert_eq!(
            err("autoscale = 1"),
            "f.toml: key \"autoscale\": a switch: true or false"
        );
        assert!(err("iface = true").contains("takes a value"));
        assert!(err("config = \"other.toml\"").contains("cannot name another"));
        assert!(err("[section]\nx = 1").contains("key \"section\""));
        let e = err("iface = \"eth0\"\ncpus = ");
        assert!(e.starts_with("f.toml: line 2: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn only_run_takes_a_configuration() {
        let words = argv(&["rsspp", "top", "--config", "x"]);
        assert_eq!(expand(words.clone()).unwrap(), words);
        let words = argv(&["rsspp", "-v", "run", "--iface", "lo"]);
        assert_eq!(expand(words.clone()).unwrap(), words);
        let e = expand(argv(&[
            "rsspp",
            "run",
            "--config",
            "/nonexistent/rsspp.toml",
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("/nonexistent/rsspp.toml: "), "{e}");
    }
}
