//! The Kubernetes API as both the agent (`reconcile/`) and the admission webhook (`webhook/`)
//! use it: the client from a kubeconfig (or the usual inference), and the node Lease's name and
//! liveness rule, so that the webhook judges an agent by the same rule the agent keeps.

pub mod lease;

use kube::Client;

/// Loads the client: the kubeconfig given, else the usual inference (in-cluster, then ~/.kube/config).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, String> {
    let config = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| format!("cannot read kubeconfig {}: {e}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", p.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no Kubernetes configuration: {e}"))?,
    };
    Client::try_from(config).map_err(|e| format!("cannot build the Kubernetes client: {e}"))
}
