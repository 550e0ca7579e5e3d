//! `rsspp status` and `rsspp detach`: what rsspp has attached where, and
//! removing it. The logic is [`rsspp_linux::lifecycle`]'s; this module
//! parses, calls and prints.

use std::io::Write;

use clap::Args;
use rsspp_linux::lifecycle::{self, Attached, Detached, Status};

use crate::error::CliError;

/// Arguments of `rsspp status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Only this interface.
    #[arg(short, long, value_name = "IF")]
    iface: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `rsspp detach`.
#[derive(Debug, Args)]
pub struct DetachArgs {
    /// The interface to remove rsspp's program from.
    #[arg(short, long, value_name = "IF")]
    iface: String,
}

/// Runs `rsspp status`.
pub fn status(args: &StatusArgs) -> Result<(), CliError> {
    let status = lifecycle::status(args.iface.as_deref())?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&to_json(&status)).expect("plain JSON");
        s.push('\n');
        s
    } else {
        to_text(&status)
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(CliError::output)
}

/// Runs `rsspp detach`.
pub fn detach(args: &DetachArgs) -> Result<(), CliError> {
    let line = match lifecycle::detach(&args.iface)? {
        Detached::Nothing { stale_pins: false } => {
            format!("{}: no rsspp program attached", args.iface)
        }
        Detached::Nothing { stale_pins: true } => format!(
            "{}: no rsspp program attached; removed its stale pins",
            args.iface
        ),
        Detached::Removed {
            prog_id,
            program,
            pinned,
        } => format!(
            "{}: detached {program} (id {prog_id}){}",
            args.iface,
            if pinned { " and removed its pins" } else { "" }
        ),
    };
    let mut out = std::io::stdout();
    writeln!(out, "{line}").map_err(CliError::output)?;
    if let Some(pid) = lifecycle::restore_saved_table(&args.iface)? {
        writeln!(
            out,
            "{}: put back the NIC's original table (saved by rsspp run, pid {pid})",
            args.iface
        )
        .map_err(CliError::output)?;
    }
    Ok(())
}

fn mode(a: &Attached) -> &'static str {
    a.mode.map_or("hw", |m| m.name())
}

fn to_json(status: &Status) -> serde_json::Value {
    let attached: Vec<serde_json::Value> = status
        .attached
        .iter()
        .map(|a| {
            let state = a.state.as_ref();
            serde_json::json!({
                "iface": a.iface,
                "ifindex": a.ifindex,
                "mode": mode(a),
                "program": a.program,
                "prog_id": a.prog_id,
                "attach": if a.link_id.is_some() { "link" } else { "netlink" },
                "link_id": a.link_id,
                "pinned": a.pinned.is_some(),
                "pin": a.pinned.as_ref().map(|p| p.display().to_string()),
                "steering": state.map(|s| s.steering.clone()),
                "reta_size": state.map(|s| s.reta_size),
                "since": a.since,
                "daemon_pid": a.daemon(),
                "holders": a.holders,
            })
        })
        .collect();
    let stale: Vec<serde_json::Value> = status
        .stale
        .iter()
        .map(|s| serde_json::json!({"iface": s.iface, "pin": s.path.display().to_string()}))
        .collect();
    let left: Vec<serde_json::Value> = status
        .left_tables
        .iter()
        .map(|t| {
            serde_json::json!({
                "iface": t.iface,
                "pid": t.pid,
                "context": t.context,
                "ntuple_rules": t.rules,
            })
        })
        .collect();
    serde_json::json!({ "attached": attached, "stale_pins": stale, "left_tables": left })
}

fn to_text(status: &Status) -> String {
    let mut out = String::new();
    if status.attached.is_empty() && status.stale.is_empty() {
        out.push_str("no rsspp program attached\n");
    }
    for t in &status.left_tables {
        let table = match t.context {
            0 => "the NIC's table".to_string(),
            n => format!("RSS context {n}'s table"),
        };
        let rules = match t.rules.len() {
            0 => String::new(),
            1 => " and 1 ntuple rule".to_string(),
            n => format!(" and {n} ntuple rules"),
        };
        let deletes = if rules.is_empty() {
            ""
        } else {
            " and deletes the rules"
        };
        out.push_str(&format!(
            "{}: {table}{rules} {verb} the one{s} rsspp run (pid {}, no longer running) wrote: `rsspp detach --iface {}` puts the original back{deletes}\n",
            t.iface,
            t.pid,
            t.iface,
            verb = if rules.is_empty() { "is" } else { "are" },
            s = if rules.is_empty() { "" } else { "s" },
        ));
    }
    for a in &status.attached {
        let state = a.state.as_ref();
        let owner = match (a.daemon(), &a.pinned, a.link_id) {
            (Some(pid), _, _) => format!("held by rsspp run, pid {pid}"),
            (None, Some(pin), _) => format!("kept, pinned at {}", pin.display()),
            (None, None, Some(_)) if !a.holders.is_empty() => format!(
                "held by pid {}",
                a.holders
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            (None, None, None) => {
                "attached through netlink, no daemon: `rsspp detach` removes it".into()
            }
            _ => "no daemon".into(),
        };
        out.push_str(&format!(
            "{}: {} (id {}), {} mode, {}{}{}\n  {}\n",
            a.iface,
            a.program,
            a.prog_id,
            mode(a),
            if a.link_id.is_some() {
                "BPF link"
            } else {
                "netlink"
            },
            state.map_or(String::new(), |s| format!(
                ", {} steering, {} buckets",
                s.steering, s.reta_size
            )),
            a.since
                .map_or(String::new(), |t| format!(", since {}", since(t))),
            owner,
        ));
    }
    for s in &status.stale {
        out.push_str(&format!(
            "{}: stale pin {} (nothing attached): `rsspp detach --iface {}` removes it\n",
            s.iface,
            s.path.display(),
            s.iface
        ));
    }
    out
}

/// Seconds since the epoch as "N s ago".
fn since(t: u64) -> String {
    let ago = lifecycle::unix_now().saturating_sub(t);
    match ago {
        0..=119 => format!("{ago} s ago"),
        120..=7199 => format!("{} min ago", ago / 60),
        _ => format!("{} h ago", ago / 3600),
    }
}

#[cfg(test)]
mod tests {
    use rsspp_linux::lifecycle::LeftTable;

    use super::*;

    #[test]
    fn a_left_table_and_its_rules_are_named_with_the_way_back() {
        let left = |rules: Vec<u32>| Status {
            left_tables: vec![LeftTable {
                iface: "eth0".into(),
                pid: 42,
                context: 0,
                rules,
            }],
            ..Status::default()
        };
        assert_eq!(
            to_text(&left(Vec::new())),
            "no rsspp program attached\n\
             eth0: the NIC's table is the one rsspp run (pid 42, no longer running) wrote: \
             `rsspp detach --iface eth0` puts the original back\n"
        );
        assert_eq!(
            to_text(&left(vec![1022, 1023])),
            "no rsspp program attached\n\
             eth0: the NIC's table and 2 ntuple rules are the ones rsspp run (pid 42, no longer \
             running) wrote: `rsspp detach --iface eth0` puts the original back and deletes the \
             rules\n"
        );
        assert_eq!(
            to_json(&left(vec![7]))["left_tables"][0]["ntuple_rules"],
            serde_json::json!([7])
        );
    }
}
