//! One module per subcommand.

pub mod balance;
pub mod bench;
pub mod compare;
pub mod demo;
pub mod docs;
pub mod figures;
pub mod hash;
pub mod nf;
pub mod nic;
pub mod reframe;
pub mod run;
pub mod serve;
pub mod status;
pub mod top;
pub mod trace;
