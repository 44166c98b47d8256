//! SGLang: its real flag table, the launch command rendered from an `InferenceServer`
//! spec, and the checks SGLang itself would make (so a bad spec fails here, with a
//! field name, instead of in a server log minutes later).

pub mod args;
pub mod command;
pub mod flag_policy;
pub mod flags;
pub mod log;
pub mod phase;
pub mod sandbox;
pub mod smoke;
pub mod speculative;

pub use phase::StartupPhase;
