//! A cost model measured on real code: the file `rsspp bench nf
//! --cost-out FILE` writes and `rsspp compare --cost-model FILE` reads.
//!
//! ```json
//! {"format":"rsspp-cost-model","version":1,"source":"rsspp bench nf",
//!  "functions":{"monitor":{"ns_per_packet":212.5}}}
//! ```
//!
//! Each network function's measured CPU time per packet (nanoseconds, of
//! the runtime's worker: parsing, hashing, the flow-table lookup, the
//! function itself) replaces the simulator's fixed cost and its W work:
//! at the simulated clock, `packet_cycles = ns × GHz`, less a cache hit's
//! cycles when the function keeps flow state (the measurement already
//! includes the lookup, which the model charges as hit, miss or remote
//! transfer on top), and `work = 0`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cost::{CostModel, StateAccess};

/// The `format` field's value.
pub const FORMAT: &str = "rsspp-cost-model";
/// The version this build writes and reads.
pub const VERSION: u32 = 1;
/// Longest cost per packet accepted, nanoseconds (1 ms: anything slower is
/// not a packet-processing function, or a broken measurement).
pub const MAX_NS_PER_PACKET: f64 = 1e6;

/// One function's measured cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionCost {
    /// CPU time per packet, nanoseconds.
    pub ns_per_packet: f64,
}

/// The file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostFile {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// What measured it (free text).
    #[serde(default)]
    pub source: String,
    /// Per function (as `rsspp nf --chain` names it).
    pub functions: BTreeMap<String, FunctionCost>,
}

/// Why a cost-model file was refused.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// Not JSON, or not this shape.
    #[error("not a cost model: {0}")]
    Json(#[from] serde_json::Error),
    /// Another format or version.
    #[error("\"format\" is {format:?} version {version}; expected {FORMAT:?} version {VERSION} (made by `rsspp bench nf --cost-out FILE`)")]
    Format {
        /// The format found.
        format: String,
        /// The version found.
        version: u32,
    },
    /// No function at all.
    #[error("\"functions\" is empty")]
    Empty,
    /// A cost out of range.
    #[error("functions.{name}.ns_per_packet is {value}; expected a number above 0 and at most {MAX_NS_PER_PACKET}")]
    BadCost {
        /// The function.
        name: String,
        /// Its value.
        value: f64,
    },
    /// The function asked for is not in the file.
    #[error("no function {name:?} in the cost model (it has: {known})")]
    NoFunction {
        /// The name asked for.
        name: String,
        /// The names in the file.
        known: String,
    },
    /// Several functions and none chosen.
    #[error("the cost model has several functions ({known}): choose one with --cost-function")]
    Ambiguous {
        /// The names in the file.
        known: String,
    },
}

impl CostFile {
    /// A file of these functions' costs.
    pub fn new(source: impl Into<String>, functions: BTreeMap<String, FunctionCost>) -> Self {
        Self {
            format: FORMAT.into(),
            version: VERSION,
            source: source.into(),
            functions,
        }
    }

    /// Parses and checks a file's text.
    pub fn from_json(text: &str) -> Result<Self, CalibrationError> {
        let file: CostFile = serde_json::from_str(text)?;
        file.validate()?;
        Ok(file)
    }

    /// The file's text (pretty JSON, a final newline).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a cost file serialises");
        s.push('\n');
        s
    }

    /// Checks the format, the version and every cost.
    pub fn validate(&self) -> Result<(), CalibrationError> {
        if self.format != FORMAT || self.version != VERSION {
            return Err(CalibrationError::Format {
                format: self.format.clone(),
                version: self.version,
            });
        }
        if self.functions.is_empty() {
            return Err(CalibrationError::Empty);
        }
        for (name, f) in &self.functions {
            let v = f.ns_per_packet;
            if !(v.is_finite() && v > 0.0 && v <= MAX_NS_PER_PACKET) {
                return Err(CalibrationError::BadCost {
                    name: name.clone(),
                    value: v,
                });
            }
        }
        Ok(())
    }

    fn known(&self) -> String {
        self.functions
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The cost of `function`, or of the only function when `None`.
    pub fn function(
        &self,
        function: Option<&str>,
    ) -> Result<(&str, FunctionCost), CalibrationError> {
        match function {
            Some(name) => self
                .functions
                .get_key_value(name)
                .map(|(k, v)| (k.as_str(), *v))
                .ok_or_else(|| CalibrationError::NoFunction {
                    name: name.to_string(),
                    known: self.known(),
                }),
            None if self.functions.len() == 1 => {
                let (k, v) = self.functions.iter().next().expect("one function");
                Ok((k.as_str(), *v))
            }
            None => Err(CalibrationError::Ambiguous {
                known: self.known(),
            }),
        }
    }

    /// Sets `cost`'s per-packet cost from `function`'s measurement (see
    /// the module docs); returns the function's name.
    pub fn apply<'a>(
        &'a self,
        function: Option<&str>,
        cost: &mut CostModel,
    ) -> Result<&'a str, CalibrationError> {
        let (name, f) = self.function(function)?;
        let cycles = f.ns_per_packet * cost.clock_ghz;
        let included = match cost.state {
            StateAccess::None => 0.0,
            StateAccess::Write => f64::from(cost.hit_cycles),
        };
        cost.packet_cycles = (cycles - included).round().clamp(1.0, f64::from(u32::MAX)) as u32;
        cost.work = 0;
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(functions: &[(&str, f64)]) -> CostFile {
        CostFile::new(
            "test",
            functions
                .iter()
                .map(|&(n, ns)| (n.to_string(), FunctionCost { ns_per_packet: ns }))
                .collect(),
        )
    }

    #[test]
    fn a_file_round_trips_and_sets_the_cost_per_packet() {
        let f = file(&[("monitor", 200.0)]);
        let back = CostFile::from_json(&f.to_json()).unwrap();
        assert_eq!(back, f);
        let mut cost = CostModel::default();
        let before = cost.nominal_cycles();
        assert_eq!(back.apply(None, &mut cost).unwrap(), "monitor");
        // 200 ns at 2.3 GHz: 460 cycles, the hit (20) counted once.
        assert_eq!(cost.packet_cycles, 440);
        assert_eq!(cost.work, 0);
        assert!(cost.nominal_cycles() < before);
        cost.validate().unwrap();
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let err = |text: &str| CostFile::from_json(text).unwrap_err().to_string();
        assert!(err("{").starts_with("not a cost model:"));
        assert!(
            err(r#"{"format":"x","version":1,"functions":{"a":{"ns_per_packet":1}}}"#)
                .contains("expected \"rsspp-cost-model\" version 1")
        );
        assert_eq!(
            err(r#"{"format":"rsspp-cost-model","version":1,"functions":{}}"#),
            "\"functions\" is empty"
        );
        assert!(err(
            r#"{"format":"rsspp-cost-model","version":1,"functions":{"a":{"ns_per_packet":-3}}}"#
        )
        .starts_with("functions.a.ns_per_packet is -3"));
        assert!(
            err(r#"{"format":"rsspp-cost-model","version":1,"functions":{"a":{"ns":3}}}"#)
                .contains("unknown field")
        );
        let two = file(&[("monitor", 100.0), ("dpi", 900.0)]);
        let mut cost = CostModel::default();
        assert_eq!(
            two.apply(None, &mut cost).unwrap_err().to_string(),
            "the cost model has several functions (dpi, monitor): choose one with --cost-function"
        );
        assert_eq!(
            two.apply(Some("nat"), &mut cost).unwrap_err().to_string(),
            "no function \"nat\" in the cost model (it has: dpi, monitor)"
        );
        assert_eq!(two.apply(Some("dpi"), &mut cost).unwrap(), "dpi");
        assert_eq!(cost.packet_cycles, 2070 - 20);
    }
}
