//! Tool implementations that come from configuration.

pub mod command;
pub mod supervisor;
