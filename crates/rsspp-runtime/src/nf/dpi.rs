//! `dpi`: multi-pattern matching of every packet's transport payload
//! against a set of byte strings (Aho-Corasick automaton, the
//! `aho-corasick` crate), with per-flow match counts in the flow state.
//! `count` only counts; `drop` drops a packet with a match and every later
//! packet of its flow (reason `dpi`). Patterns are matched within one
//! packet's payload: a pattern split across two packets is not found.

use aho_corasick::AhoCorasick;

use super::headers::Ip;
use super::{Packet, Verdict};

/// The reason `dpi` drops under.
pub const DROP: &str = "dpi";

/// What a match does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Count it in the flow's state.
    Count,
    /// Count it and drop the flow from this packet on.
    Drop,
}

/// A malformed patterns file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// No pattern in it.
    #[error("{0}: no pattern (one a line)")]
    Empty(String),
    /// The automaton could not be built.
    #[error("{origin}: {message}")]
    Build {
        /// The file.
        origin: String,
        /// The crate's message.
        message: String,
    },
}

/// The patterns: one a line, each line's bytes taken literally (a
/// trailing `\r` removed); empty lines are skipped.
pub fn parse_patterns(text: &[u8], origin: &str) -> Result<Vec<Vec<u8>>, PatternError> {
    let patterns: Vec<Vec<u8>> = text
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if patterns.is_empty() {
        return Err(PatternError::Empty(origin.to_string()));
    }
    Ok(patterns)
}

/// A flow's DPI state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DpiState {
    /// Matches found in its payloads.
    pub matches: u64,
    /// Blocked by `drop`: its later packets are dropped unexamined.
    pub blocked: bool,
}

/// The matcher; see the module docs.
#[derive(Debug, Clone)]
pub struct Dpi {
    automaton: AhoCorasick,
    action: Action,
}

impl Dpi {
    /// Builds the automaton.
    pub fn new(patterns: &[Vec<u8>], action: Action, origin: &str) -> Result<Self, PatternError> {
        let automaton = AhoCorasick::new(patterns).map_err(|e| PatternError::Build {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        Ok(Self { automaton, action })
    }

    /// Matches in `payload` (non-overlapping, leftmost).
    pub fn count(&self, payload: &[u8]) -> u64 {
        self.automaton.find_iter(payload).count() as u64
    }

    /// Examines a packet with its flow's state.
    pub fn process(
        &self,
        packet: &Packet<'_>,
        ip: Option<&Ip>,
        state: Option<&mut DpiState>,
    ) -> Verdict {
        if state.as_ref().is_some_and(|s| s.blocked) {
            return Verdict::Drop(DROP);
        }
        let found = ip.map_or(0, |ip| self.count(ip.payload(packet.data)));
        if let Some(s) = state {
            s.matches += found;
            if found > 0 && self.action == Action::Drop {
                s.blocked = true;
            }
        }
        if found > 0 && self.action == Action::Drop {
            Verdict::Drop(DROP)
        } else {
            Verdict::Forward
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_lines_taken_literally() {
        let p = parse_patterns(b"evil\r\n\n# not a comment\nGET /admin\n", "p").unwrap();
        assert_eq!(
            p,
            vec![
                b"evil".to_vec(),
                b"# not a comment".to_vec(),
                b"GET /admin".to_vec()
            ]
        );
        assert_eq!(
            parse_patterns(b"\n\n", "p.txt").unwrap_err().to_string(),
            "p.txt: no pattern (one a line)"
        );
    }

    #[test]
    fn matches_are_counted() {
        let d = Dpi::new(
            &[b"abc".to_vec(), b"bcd".to_vec(), b"x".to_vec()],
            Action::Count,
            "p",
        )
        .unwrap();
        assert_eq!(d.count(b"abcd x abc"), 3);
        assert_eq!(d.count(b"nothing"), 0);
    }
}
