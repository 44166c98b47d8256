//! Which resource a problem, a decision or a condition belongs to: `GpuPartition/<name>`,
//! `InferenceServer/<namespace>/<name>` or `GpuNodePool/<name>`, as a type rather than text joined by string equality.
//! It prints (and serializes as) exactly that text, so the CLI's output, the JSON report and the
//! status files read as they always did.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A resource of this project, by kind and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ResourceKey {
    Partition {
        name: String,
    },
    Server {
        namespace: String,
        name: String,
    },
    /// A `GpuNodePool` (its spec problems; the agents write its status, not conditions here).
    Pool {
        name: String,
    },
}

impl ResourceKey {
    pub fn partition(name: impl Into<String>) -> ResourceKey {
        ResourceKey::Partition { name: name.into() }
    }

    pub fn server(namespace: impl Into<String>, name: impl Into<String>) -> ResourceKey {
        ResourceKey::Server {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn pool(name: impl Into<String>) -> ResourceKey {
        ResourceKey::Pool { name: name.into() }
    }

    /// A server by its id, `<namespace>/<name>` (a name never holds a `/`).
    pub fn server_id(id: &str) -> ResourceKey {
        match id.split_once('/') {
            Some((ns, name)) => ResourceKey::server(ns, name),
            None => ResourceKey::server("", id),
        }
    }

    /// `GpuPartition`, `InferenceServer` or `GpuNodePool`.
    pub fn kind(&self) -> &'static str {
        match self {
            ResourceKey::Partition { .. } => "GpuPartition",
            ResourceKey::Server { .. } => "InferenceServer",
            ResourceKey::Pool { .. } => "GpuNodePool",
        }
    }
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResourceKey::Partition { name } => write!(f, "GpuPartition/{name}"),
            ResourceKey::Server { namespace, name } => {
                write!(f, "InferenceServer/{namespace}/{name}")
            }
            ResourceKey::Pool { name } => write!(f, "GpuNodePool/{name}"),
        }
    }
}

impl std::str::FromStr for ResourceKey {
    type Err = String;
    fn from_str(s: &str) -> Result<ResourceKey, String> {
        if let Some(name) = s.strip_prefix("GpuPartition/") {
            return Ok(ResourceKey::partition(name));
        }
        if let Some(id) = s.strip_prefix("InferenceServer/") {
            return Ok(ResourceKey::server_id(id));
        }
        if let Some(name) = s.strip_prefix("GpuNodePool/") {
            return Ok(ResourceKey::pool(name));
        }
        Err(format!(
            "{s:?} is not GpuPartition/<name>, InferenceServer/<namespace>/<name> or GpuNodePool/<name>"
        ))
    }
}

/// Compared with the text it prints (`b.resource == "GpuPartition/kpro6"`).
impl PartialEq<str> for ResourceKey {
    fn eq(&self, other: &str) -> bool {
        match self {
            ResourceKey::Partition { name } => other.strip_prefix("GpuPartition/") == Some(name),
            ResourceKey::Pool { name } => other.strip_prefix("GpuNodePool/") == Some(name),
            ResourceKey::Server { namespace, name } => {
                other
                    .strip_prefix("InferenceServer/")
                    .and_then(|r| r.strip_prefix(namespace.as_str()))
                    .and_then(|r| r.strip_prefix('/'))
                    == Some(name)
            }
        }
    }
}

impl PartialEq<&str> for ResourceKey {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

/// Ordered as their text, as the string keys were (reports list resources in this order).
impl Ord for ResourceKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

impl PartialOrd for ResourceKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Serialize for ResourceKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ResourceKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ResourceKey, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
