//! Which objects an agent watches, caches and lists: only its own node's, by the label
//! [`NODE_LABEL`] (`gpuplane.dev/node=<node>`).
//!
//! A `GpuPartition` carries the label with its `spec.nodeName`; an `InferenceServer` carries the
//! node of the partition it names. The labels are set by whoever writes the objects (the
//! manifests in `examples/` carry them); no webhook has to run for a labelled cluster to work.
//! The agent never writes labels: its identity may change only finalizers and status.
//!
//! # Guarantees
//! - With [`WatchScope::Node`] (the default) the API server filters every watch and list by the
//!   selector, so another node's objects are never sent to this agent, never cached and never
//!   reconciled: the agent's memory and watch traffic depend on its own node only.
//! - A label that is missing or wrong is never silent (see [`label_problem`] and
//!   `strays.rs`): the object gets `Ready=False` with reason [`NODE_LABEL_MISSING`] or
//!   [`NODE_LABEL_MISMATCH`], naming the label to set, from the agent that can see it.
//! - [`WatchScope::Cluster`] keeps the behaviour before scoping (every object watched, filtered
//!   by `spec.nodeName` in the agent) for clusters that cannot label yet, and for the fleet
//!   test's "before" measurement. It costs every agent the whole cluster.
//!
//! # Caveats
//! - An object labelled for a node that has no agent is seen by nobody (as a partition for a
//!   node without an agent always was).
//! - Label values are at most 63 characters: a node whose name is longer cannot be selected by
//!   label; such a node runs its agent with `--watch-scope cluster`.

use gpuplane_crds::{GpuPartition, InferenceServer};
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::ResourceExt;

use gpuplane_crds::reason::Reason;
pub use gpuplane_crds::NODE_LABEL;

/// Reason of an object of this node that lacks the label.
pub const NODE_LABEL_MISSING: Reason = Reason::NodeLabelMissing;
/// Reason of an object whose label names another node than its own.
pub const NODE_LABEL_MISMATCH: Reason = Reason::NodeLabelMismatch;

/// What an agent watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchScope {
    /// Only objects labelled `gpuplane.dev/node=<its node>` (and, through a second watch, the
    /// unlabelled ones, to report them).
    #[default]
    Node,
    /// Every object of the cluster, filtered by `spec.nodeName` in the agent.
    Cluster,
}

impl WatchScope {
    /// The names `--watch-scope` takes.
    pub const NAMES: [&'static str; 2] = ["node", "cluster"];
}

impl std::str::FromStr for WatchScope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "node" => Ok(WatchScope::Node),
            "cluster" => Ok(WatchScope::Cluster),
            other => Err(format!(
                "unknown watch scope {other:?}: expected node or cluster"
            )),
        }
    }
}

/// The label selector of one node's objects.
pub fn node_selector(node: &str) -> String {
    format!("{NODE_LABEL}={node}")
}

/// The label selector of objects without the label.
pub fn unlabelled_selector() -> String {
    format!("!{NODE_LABEL}")
}

/// The agent's watches under `scope`: its node's objects, or every object.
///
/// Under node scope the initial list (and every relist) is served from the API server's watch
/// cache (`any_semantic`: `resourceVersion=0`): a paged list from etcd reads every object of
/// the kind to filter it, and with 10,000 servers and 20 agents those lists ran past the API
/// server's 60 s and were answered 504, again and again (docs/BENCHMARKS.md). The watch that
/// follows delivers every change after the cached list, so nothing is missed.
pub fn watch_config(scope: WatchScope, node: &str) -> watcher::Config {
    match scope {
        WatchScope::Node => from_watch_cache(
            watcher::Config::default()
                .labels(&node_selector(node))
                .any_semantic(),
        ),
        WatchScope::Cluster => watcher::Config::default(),
    }
}

/// Lists unpaged: a paged list (`limit`) drops `resourceVersion=0` and goes to etcd again;
/// the answer holds one node's objects only.
fn from_watch_cache(mut c: watcher::Config) -> watcher::Config {
    c.page_size = None;
    c
}

/// The stray watches' config: objects without the label, listed from the watch cache.
pub fn unlabelled_config() -> watcher::Config {
    from_watch_cache(
        watcher::Config::default()
            .labels(&unlabelled_selector())
            .any_semantic(),
    )
}

/// The agent's lists under `scope` (the same objects as [`watch_config`]).
///
/// Under node scope a list is served from the API server's watch cache (`resourceVersion=0`,
/// `NotOlderThan`) and filtered there: no etcd read and no decoding of the whole kind per
/// reconcile, which with 10,000 servers made the API server answer 504 to a fleet of agents
/// (docs/BENCHMARKS.md). The cache is at least as new as the watch event that triggered the
/// reconcile (both come from it); a write based on an older object fails its
/// `resourceVersion` test and is retried. Cluster scope keeps the quorum read it always had.
pub fn list_params(scope: WatchScope, node: &str) -> ListParams {
    match scope {
        WatchScope::Node => ListParams::default()
            .labels(&node_selector(node))
            .match_any(),
        WatchScope::Cluster => ListParams::default(),
    }
}

/// What is wrong with an object's node label, as seen by one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelProblem {
    /// [`NODE_LABEL_MISSING`] or [`NODE_LABEL_MISMATCH`].
    pub reason: Reason,
    /// What a person reads, naming the label to set.
    pub message: String,
}

/// The node label of an object ("" when it has none).
pub fn node_label<K: kube::Resource>(o: &K) -> String {
    o.labels().get(NODE_LABEL).cloned().unwrap_or_default()
}

/// Whether a label of `o` says `want`, else what is wrong: the label is missing, or names
/// another node. `kind_name` names the object in the message (`GpuPartition/kpro6`).
pub fn label_problem(label: &str, want: &str, kind_name: &str, why: &str) -> Option<LabelProblem> {
    if label == want {
        return None;
    }
    let fix = format!("kubectl label --overwrite {kind_name} {NODE_LABEL}={want}");
    Some(if label.is_empty() {
        LabelProblem {
            reason: NODE_LABEL_MISSING,
            message: format!(
                "label {NODE_LABEL} is missing; {why}, and its agent watches only objects \
                 labelled {NODE_LABEL}={want}, so nothing is done for it until it is labelled: {fix}"
            ),
        }
    } else {
        LabelProblem {
            reason: NODE_LABEL_MISMATCH,
            message: format!(
                "label {NODE_LABEL}={label} names another node; {why}, and the agent of \
                 {want} does not see it, so nothing is done for it until it is relabelled: {fix}"
            ),
        }
    })
}

/// The label problem of a partition: its label must equal its `spec.nodeName`.
pub fn partition_problem(p: &GpuPartition) -> Option<LabelProblem> {
    let node = &p.spec.node_name;
    label_problem(
        &node_label(p),
        node,
        &format!("gpupartition/{}", p.name_any()),
        &format!("its spec.nodeName is {node}"),
    )
}

/// The label problem of a server whose partition is `p`: its label must equal the
/// partition's node.
pub fn server_problem(s: &InferenceServer, p: &GpuPartition) -> Option<LabelProblem> {
    let node = &p.spec.node_name;
    label_problem(
        &node_label(s),
        node,
        &format!(
            "inferenceserver/{} -n {}",
            s.name_any(),
            s.namespace().unwrap_or_default()
        ),
        &format!("its partition {} is on node {node}", p.name_any()),
    )
}

/// Counts the objects a watch stream delivers (added, modified, deleted, listed) in `counter`:
/// what the API server sent this agent.
pub fn counted<K, S>(
    stream: S,
    counter: prometheus::IntCounter,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    use futures::StreamExt;
    stream.inspect(move |ev| {
        if let Ok(
            watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitApply(_),
        ) = ev
        {
            counter.inc();
        }
    })
}

#[cfg(test)]
mod tests;
