//! One module per subcommand.

pub mod balance;
pub mod demo;
pub mod hash;
