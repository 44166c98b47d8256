//! How a command fails: a message and an exit code, converted once from each error type.
//!
//! Exit code 2 is input the user must fix (a bad manifest, an invalid spec, an unknown host);
//! 1 is everything else that stopped the command (the host failed, a unit could not be
//! rendered, an output could not be written).

use crate::host::HostError;
use crate::systemd::unit::UnitError;

/// A CLI failure with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// Input the user must fix (exit 2).
    #[error("{0}")]
    Input(String),
    /// Anything else that stopped the command (exit 1).
    #[error("{0}")]
    Failed(String),
}

impl Failure {
    /// Bad input: exit code 2.
    pub fn input(message: impl Into<String>) -> Failure {
        Failure::Input(message.into())
    }

    /// The process exit code.
    pub fn code(&self) -> i32 {
        match self {
            Failure::Input(_) => 2,
            Failure::Failed(_) => 1,
        }
    }
}

macro_rules! failed_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Failure {
                Failure::Failed(e.to_string())
            }
        }
    )*};
}

impl From<crate::pass::select::Refused> for Failure {
    /// A host that cannot be observed stopped the command; manifests that give it nothing to
    /// converge to are the user's to fix.
    fn from(e: crate::pass::select::Refused) -> Failure {
        match e {
            crate::pass::select::Refused::Observe(e) => e.into(),
            crate::pass::select::Refused::Select(e) => Failure::input(e.to_string()),
        }
    }
}

failed_from!(
    HostError,
    UnitError,
    serde_json::Error,
    serde_yaml::Error,
    std::io::Error
);
