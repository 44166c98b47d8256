//! The admission webhook on the real kube-apiserver 1.20.2: `kubectl apply` of a wrong spec
//! fails at once with the message the CLI prints, the valid examples apply, and with the
//! webhook stopped what happens is what docs/validate.md says (`failurePolicy: Ignore` admits; the
//! agent judges later).
//!
//! The webhook runs as a process on loopback with a certificate made by openssl for
//! 127.0.0.1; the API server calls it by URL with that certificate as its caBundle.

use gpuplane_e2e::kube::Cluster;
use gpuplane_e2e::manifests::invalid_examples;
use gpuplane_e2e::net::free_ports;
use gpuplane_e2e::paths::{gpuplane_bin, repo_path, repo_root};
use gpuplane_e2e::scenario::report_duration;
use gpuplane_e2e::wait::wait_for;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Examples whose mistake only the host can show (GPUs present, containers existing, the size of
/// a NUMA node): the webhook cannot see the host, so they are admitted and left to the agent.
const HOST_DEPENDENT: &[&str] = &[
    "address-not-on-host",
    "numa-node-without-gpus",
    "lxc-container-missing",
    "tp-larger-than-slice",
    "gpu-in-two-slices",
    // iommu=pt breaks only an SEV-SNP VM: whether slice 1's VM is one is in its config on the
    // host (amd-sev: type=snp), which the webhook cannot read; the agent refuses it.
    "kernel-arg-disables-snp",
];

/// Examples the API server refuses on its own from the CRD schema (before any webhook), or
/// kubectl from the published schema: refused at once, in their words.
const SCHEMA: &[&str] = &[
    "port-out-of-range",
    "maintenance-window-not-hhmm",
    "driver-typo",
    "name-not-dns",
    "misspelt-field",
    "empty-address-list",
    "missing-model-path",
];

/// A self-signed certificate for 127.0.0.1: (cert, key) paths.
fn certificate(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("webhook.crt"), dir.join("webhook.key"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert.display().to_string(), key.display().to_string())
}

/// The webhook process, killed when dropped: a test that fails (panics) leaves none running.
struct Webhook(Child);

impl std::ops::Deref for Webhook {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Webhook {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        // SIGKILL ends it frozen (SIGSTOP) too; one that ended already was reaped by its test.
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// Starts `gpuplane webhook` with `agent_args` and waits until it accepts connections.
fn start_webhook(c: &Cluster, port: u16, cert: &str, key: &str, agent_args: &[&str]) -> Webhook {
    let log = std::fs::File::create(c.cp.run.join("webhook.log")).expect("log");
    let child = Command::new(gpuplane_bin())
        .args(["webhook", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--tls-cert", cert, "--tls-key", key])
        .args(agent_args)
        .arg("--kubeconfig")
        .arg(c.cp.kubeconfig())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start gpuplane webhook");
    wait_for("the webhook to listen", Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    Webhook(child)
}

/// The ValidatingWebhookConfiguration, as the chart writes it for Kubernetes 1.20 (no
/// matchConditions) but with a URL: spec validation with `policy`, the agent rules (objects,
/// Leases) failing closed, the agent's events with Ignore.
fn registration(port: u16, cert: &str, policy: &str) -> String {
    let out = Command::new("base64")
        .args(["-w0", cert])
        .output()
        .expect("base64");
    let ca = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let client = |path: &str| {
        format!(
            "    clientConfig:\n      url: https://127.0.0.1:{port}{path}\n      caBundle: {ca}\n"
        )
    };
    let (spec, agent) = (client("/validate"), client("/validate-agent"));
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: gpuplane
webhooks:
  - name: validate.gpuplane.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: {policy}
    timeoutSeconds: 5
{spec}    rules:
      - apiGroups: ["gpuplane.dev"]
        apiVersions: ["v1alpha1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["gpupartitions", "inferenceservers", "gpunodepools"]
  - name: agent.gpuplane.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 5
{agent}    rules:
      - apiGroups: ["gpuplane.dev"]
        apiVersions: ["v1alpha1"]
        operations: ["UPDATE"]
        resources: ["gpupartitions", "inferenceservers", "gpupartitions/status", "inferenceservers/status"]
      - apiGroups: ["gpuplane.dev"]
        apiVersions: ["v1alpha1"]
        operations: ["UPDATE"]
        resources: ["gpunodepools/status"]
  - name: leases.gpuplane.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 5
{agent}    objectSelector:
      matchExpressions:
        - key: gpuplane.dev/node
          operator: Exists
    rules:
      - apiGroups: ["coordination.k8s.io"]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["leases"]
  - name: lease-renewals.gpuplane.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Ignore
    timeoutSeconds: 5
{agent}    objectSelector:
      matchExpressions:
        - key: gpuplane.dev/node
          operator: Exists
    rules:
      - apiGroups: ["coordination.k8s.io"]
        apiVersions: ["v1"]
        operations: ["UPDATE"]
        resources: ["leases"]
  - name: events.gpuplane.dev
    admissionReviewVersions: ["v1"]
    sideEffects: None
    matchPolicy: Exact
    failurePolicy: Ignore
    timeoutSeconds: 5
{agent}    rules:
      - apiGroups: ["events.k8s.io"]
        apiVersions: ["v1", "v1beta1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["events"]
"#
    )
}

/// The `field: message` lines the CLI prints for an example.
fn cli_problems(example: &str) -> Vec<String> {
    let out = Command::new(gpuplane_bin())
        .args(["plan", "-f", &repo_path(example)])
        .current_dir(repo_root())
        .output()
        .expect("gpuplane plan");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{example} must be invalid for the CLI"
    );
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("  - "))
        // `Kind/ns/name: field: message` (or `Kind/name (file, document n): ...` for the schema).
        .filter_map(|l| l.split_once(": ").map(|(_, rest)| rest.to_string()))
        .collect()
}

/// The agent's own credentials (user gpuplane-agent, whose RBAC may patch the objects) change
/// finalizers, never a spec: a stolen agent token cannot rewrite what the admin declared.
fn agent_may_change_only_finalizers(c: &Cluster) {
    let patch = |p: &str| {
        c.cp.kubectl_agent(&["patch", "gpupartition", "kpro6", "--type", "merge", "-p", p])
            .run()
    };
    let spec = patch(r#"{"spec":{"deletionPolicy":"Restore"}}"#);
    assert!(
        !spec.success
            && spec
                .stderr
                .contains("may change only finalizers and status"),
        "the agent changed a spec: {}{}",
        spec.stdout,
        spec.stderr
    );
    for p in [
        r#"{"metadata":{"finalizers":["gpuplane.dev/test"]}}"#,
        r#"{"metadata":{"finalizers":null}}"#,
    ] {
        let fin = patch(p);
        assert!(fin.success, "the agent could not patch {p}: {}", fin.stderr);
    }
    eprintln!("[kube_webhook] the agent's spec patch was refused; its finalizer patches passed");
}

#[test]
fn kubectl_apply_of_a_wrong_spec_fails_at_once_with_the_clis_message() {
    let t0 = Instant::now();
    let c = Cluster::start("webhook");
    let (cert, key) = certificate(&c.cp.run);
    let port = free_ports(1)[0];
    let mut webhook = start_webhook(&c, port, &cert, &key, &["--agent-user", "gpuplane-agent"]);
    c.k_stdin(&["apply", "-f", "-"], &registration(port, &cert, "Fail"));
    // The valid reference split applies (the webhook admits it).
    wait_for(
        "the valid examples to apply",
        Duration::from_secs(30),
        || {
            let o =
                c.cp.kubectl(&["apply", "-f", &repo_path("examples/kpro6/")])
                    .run();
            if o.success {
                Ok(())
            } else {
                Err(o.stderr)
            }
        },
    );
    let (mut by_webhook, mut by_schema, mut admitted) = (0, 0, 0);
    for name in invalid_examples() {
        let file = format!("examples/invalid/{name}.yaml");
        let t = Instant::now();
        let o = c.cp.kubectl(&["apply", "-f", &repo_path(&file)]).run();
        let said = format!("{}{}", o.stdout, o.stderr);
        if name == "partition-ref-unknown" {
            // GitOps may apply a server before its partition: admitted, with the warning.
            assert!(o.success, "{name}: {said}");
            assert!(
                said.contains("Warning: spec.partitionRef.name"),
                "{name}: {said}"
            );
            c.apply("examples/kpro6/");
            admitted += 1;
            continue;
        }
        if HOST_DEPENDENT.contains(&name.as_str()) {
            assert!(
                o.success,
                "{name} is host-dependent and must be admitted: {said}"
            );
            admitted += 1;
            // Put the reference split back for the next example.
            c.apply("examples/kpro6/");
            continue;
        }
        assert!(!o.success, "{name}: kubectl apply succeeded: {said}");
        let problems = cli_problems(&file);
        if SCHEMA.contains(&name.as_str()) {
            // Refused by the API server's (or kubectl's) own schema check: the field is named.
            let field = problems[0]
                .split(": ")
                .next()
                .unwrap_or_default()
                .to_string();
            let leaf = field.rsplit('.').next().unwrap_or(&field).to_string();
            assert!(said.contains(&leaf), "{name}: {said} does not name {field}");
            by_schema += 1;
        } else {
            assert!(said.contains("denied the request"), "{name}: {said}");
            for p in &problems {
                assert!(
                    said.contains(p.as_str()),
                    "{name}: the CLI says {p:?}; kubectl said {said}"
                );
            }
            by_webhook += 1;
        }
        eprintln!(
            "[kube_webhook] {name}: refused in {:.2}s",
            t.elapsed().as_secs_f64()
        );
    }
    eprintln!("[kube_webhook] refused by the webhook: {by_webhook}, by the schema: {by_schema}, admitted (host-dependent): {admitted}");
    assert!(
        by_webhook >= 10,
        "too few examples reached the webhook: {by_webhook}"
    );

    agent_may_change_only_finalizers(&c);

    // The webhook stopped: with failurePolicy Fail nothing passes; with Ignore (the chart's
    // default) a new object is admitted and the agent judges it against the host. An update
    // fails closed either way on 1.20: the agent-rules entry (Fail) sees every user's updates
    // (no matchConditions before 1.28).
    webhook.kill().ok();
    webhook.wait().ok();
    let wrong = repo_path("examples/invalid/newline-in-served-name.yaml");
    // Its objects deleted first (a delete waits on no entry), so the apply below creates them.
    c.k(&["delete", "-f", &wrong, "--wait=false"]);
    let o = c.cp.kubectl(&["apply", "-f", &wrong]).run();
    assert!(
        !o.success && o.stderr.contains("failed calling webhook"),
        "{}",
        o.stderr
    );
    c.k_stdin(&["apply", "-f", "-"], &registration(port, &cert, "Ignore"));
    let o = c.cp.kubectl(&["apply", "-f", &wrong]).run();
    assert!(
        o.success,
        "failurePolicy Ignore must admit while the webhook is down: {}",
        o.stderr
    );
    let o =
        c.cp.kubectl(&["label", "gpupartition", "kpro6", "x=y"])
            .run();
    assert!(
        !o.success && o.stderr.contains("agent.gpuplane.dev"),
        "an update must fail closed on the agent entry: {}",
        o.stderr
    );
    report_duration(
        "kubectl_apply_of_a_wrong_spec_fails_at_once_with_the_clis_message",
        t0,
    );
}

const AGENT_SA: &str = "system:serviceaccount:gpuplane-system:gpuplane";

/// The agent's ServiceAccount, bound to the agent's rules, and two pods of it (never run: there
/// is no kubelet) on node kpro6 and on node other, as the chart's DaemonSet would place them.
const AGENT_PODS: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: gpuplane, namespace: gpuplane-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gpuplane-agent-sa}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gpuplane-agent}
subjects: [{kind: ServiceAccount, name: gpuplane, namespace: gpuplane-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: gpuplane-agent-lease-sa, namespace: gpuplane-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gpuplane-agent-lease}
subjects: [{kind: ServiceAccount, name: gpuplane, namespace: gpuplane-system}]
---
apiVersion: v1
kind: Pod
metadata: {name: agent-kpro6, namespace: gpuplane-system}
spec:
  nodeName: kpro6
  serviceAccountName: gpuplane
  automountServiceAccountToken: false
  containers: [{name: agent, image: gpuplane:test}]
---
apiVersion: v1
kind: Pod
metadata: {name: agent-other, namespace: gpuplane-system}
spec:
  nodeName: other
  serviceAccountName: gpuplane
  automountServiceAccountToken: false
  containers: [{name: agent, image: gpuplane:test}]
"#;

/// A token of the agent's ServiceAccount from the TokenRequest API (what the kubelet mounts
/// for a projected volume), bound to `pod` when given.
fn agent_token(c: &Cluster, pod: Option<&str>) -> String {
    let bound = match pod {
        Some(p) => {
            let uid = c.k(&[
                "get",
                "pod",
                p,
                "-n",
                "gpuplane-system",
                "-o",
                "jsonpath={.metadata.uid}",
            ]);
            format!(
                r#","boundObjectRef":{{"apiVersion":"v1","kind":"Pod","name":"{p}","uid":"{uid}"}}"#
            )
        }
        None => String::new(),
    };
    let req = c.cp.run.join("token-request.json");
    std::fs::write(
        &req,
        format!(
            r#"{{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{{"expirationSeconds":3600{bound}}}}}"#
        ),
    )
    .unwrap();
    let out = c.k(&[
        "create",
        "--raw",
        "/api/v1/namespaces/gpuplane-system/serviceaccounts/gpuplane/token",
        "-f",
        &req.display().to_string(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("TokenRequest answer");
    v["status"]["token"].as_str().expect("a token").to_string()
}

/// The agent user's kubeconfig with `token` in place of its static token.
fn kubeconfig_with(c: &Cluster, token: &str, name: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(c.cp.agent_kubeconfig()).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("token:") {
                format!("    token: {token}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = c.cp.run.join(name);
    std::fs::write(&path, text + "\n").unwrap();
    path
}

/// `kubectl` as the holder of `kubeconfig`: (succeeded, stdout + stderr).
fn as_agent(c: &Cluster, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let o = c.cp.kubectl_as(kubeconfig, args).run();
    (o.success, format!("{}{}", o.stdout, o.stderr))
}

/// Starts the webhook with the agent rules for the chart's agent ServiceAccount (node-bound
/// tokens required, Leases in `gpuplane-system`), registers it with the spec entry's
/// `spec_policy`, and creates the agents' pods: the webhook and its port.
fn agent_webhook(c: &Cluster, spec_policy: &str) -> (Webhook, u16) {
    let (cert, key) = certificate(&c.cp.run);
    let port = free_ports(1)[0];
    let webhook = start_webhook(
        c,
        port,
        &cert,
        &key,
        &[
            "--agent-user",
            AGENT_SA,
            "--require-agent-node",
            "--lease-namespace",
            "gpuplane-system",
            // The API server calls from 127.0.0.1 (the chart passes networkPolicy.apiServerCIDRs).
            "--trusted-peers",
            "127.0.0.1/32",
        ],
    );
    c.k_stdin(
        &["apply", "-f", "-"],
        &registration(port, &cert, spec_policy),
    );
    c.k_stdin(&["apply", "-f", "-"], AGENT_PODS);
    (webhook, port)
}

/// The reference partition for node `other`, which no agent serves.
fn other_partition() -> String {
    std::fs::read_to_string(repo_path("examples/kpro6/partition.yaml"))
        .unwrap()
        .replace("name: kpro6", "name: other")
        .replace("nodeName: kpro6", "nodeName: other")
        .replace("gpuplane.dev/node: kpro6", "gpuplane.dev/node: other")
}

/// Finding 5 of the security review, on the real API server: an agent's pod-bound token (what
/// the chart mounts) reaches only its own node's objects and Lease. The webhook reads the node
/// from the token's pod. The real agent, with that token, converges its node through the webhook.
#[test]
fn an_agent_token_reaches_only_its_own_nodes_objects_and_lease() {
    use gpuplane_e2e::agent::{Agent, AgentOpts};
    let t0 = Instant::now();
    let c = Cluster::start("webhook-node");
    let (mut webhook, _) = agent_webhook(&c, "Fail");
    // The other node's partition (the admin's, admitted).
    let other = other_partition();
    // No agent serves node other: admitted, with a warning that says so.
    let warned = wait_for("the webhook to admit", Duration::from_secs(30), || {
        let o = c.cp.kubectl(&["apply", "-f", "-"]).stdin(&other).run();
        if o.success {
            Ok(o.stderr)
        } else {
            Err(o.stderr)
        }
    });
    assert!(
        warned
            .contains("Warning: spec.nodeName: no gpuplane agent holds a Lease for node \"other\""),
        "{warned}"
    );

    // The real agent of kpro6, with its pod's token: finalizers, Lease and status all pass.
    let mine = kubeconfig_with(
        &c,
        &agent_token(&c, Some("agent-kpro6")),
        "kpro6.kubeconfig",
    );
    let agent = Agent::start_with_kubeconfig(&c, "agent-kpro6", AgentOpts::default(), &mine);
    c.apply_examples_and_wait();
    let lease = c.json(&[
        "get",
        "lease",
        "gpuplane-node-kpro6",
        "-n",
        "gpuplane-system",
    ]);
    assert_eq!(lease["metadata"]["labels"]["gpuplane.dev/node"], "kpro6");
    assert_eq!(c.lease_holder(), "agent-kpro6");
    // Node kpro6 is served now: applying its partition again warns of nothing.
    let o =
        c.cp.kubectl(&["apply", "-f", &repo_path("examples/kpro6/partition.yaml")])
            .run();
    assert!(o.success && !o.stderr.contains("Warning"), "{}", o.stderr);
    eprintln!("[kube_webhook] the agent of kpro6 converged with its pod-bound token");

    // The same token on the other node's objects.
    let (ok, said) = as_agent(
        &c,
        &mine,
        &[
            "patch",
            "gpupartition",
            "other",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":["gpuplane.dev/test"]}}"#,
        ],
    );
    assert!(
        !ok && said.contains("acts for node kpro6; this object belongs to node other"),
        "{said}"
    );
    let other_lease = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"gpuplane-node-other","namespace":"gpuplane-system","labels":{"gpuplane.dev/node":"other"}},"spec":{"holderIdentity":"thief"}}"#;
    let o =
        c.cp.kubectl_as(&mine, &["create", "-f", "-"])
            .stdin(other_lease)
            .run();
    assert!(
        !o.success && o.stderr.contains("belongs to node other"),
        "{}",
        o.stderr
    );
    let lying = other_lease.replace(
        r#""gpuplane.dev/node":"other""#,
        r#""gpuplane.dev/node":"kpro6""#,
    );
    let o =
        c.cp.kubectl_as(&mine, &["create", "-f", "-"])
            .stdin(&lying)
            .run();
    assert!(
        !o.success
            && o.stderr
                .contains("is gpuplane-node-kpro6, not gpuplane-node-other"),
        "{}",
        o.stderr
    );
    // Its own Lease, unlabelled (to slip out of the webhook's sight): refused.
    let mut own = c.json(&[
        "get",
        "lease",
        "gpuplane-node-kpro6",
        "-n",
        "gpuplane-system",
    ]);
    own["metadata"]["labels"] = serde_json::json!({});
    // Unconditional (the agent renews it meanwhile; a stale resourceVersion would be a 409).
    own["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    // A Lease takes no unconditional update: the API server still compares against the
    // version it read, so a renewal landing between its read and its write is a 409 before the
    // webhook is asked. Asked again then (the webhook's answer is what is checked).
    let replace = || {
        c.cp.kubectl_as(&mine, &["replace", "-f", "-"])
            .stdin(&own.to_string())
            .run()
    };
    let mut o = replace();
    for _ in 0..5 {
        if !o.stderr.contains("(Conflict)") {
            break;
        }
        o = replace();
    }
    assert!(
        !o.success && o.stderr.contains("must carry the label"),
        "{}",
        o.stderr
    );

    // A token bound to nothing: its node is unknown, so it may do nothing.
    let loose = kubeconfig_with(&c, &agent_token(&c, None), "loose.kubeconfig");
    let (ok, said) = as_agent(
        &c,
        &loose,
        &[
            "patch",
            "gpupartition",
            "kpro6",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":["gpuplane.dev/test"]}}"#,
        ],
    );
    assert!(!ok && said.contains("bound to no pod or node"), "{said}");
    // The other pod's token reaches the other node's object (the node comes from the pod).
    let theirs = kubeconfig_with(
        &c,
        &agent_token(&c, Some("agent-other")),
        "other.kubeconfig",
    );
    let (ok, said) = as_agent(
        &c,
        &theirs,
        &[
            "patch",
            "gpupartition",
            "other",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":["gpuplane.dev/test"]}}"#,
        ],
    );
    assert!(ok, "{said}");

    // Issue 37: a pool's status. The admin's pool, paused by node other's failure, its slot held.
    pool_status_is_guarded(&c, &mine);
    drop(agent);
    webhook.kill().ok();
    webhook.wait().ok();
    eprintln!("[kube_webhook] another node's partition and Lease, a relabelled Lease and an unbound token were refused");
    report_duration(
        "an_agent_token_reaches_only_its_own_nodes_objects_and_lease",
        t0,
    );
}

/// Issue 41, part 2, through the webhook: the agents of kpro6 and other, each with its pod's
/// bound token (what the chart mounts), are the two members of a pool of `maxUnavailable: 1`
/// whose status writes the agent rules judge (`failurePolicy: Fail`). One apply changes both
/// members' servers: one member takes the slot, restarts its server and gives the slot back
/// handed on to the other in the same write — which the webhook admits (the receiver is listed
/// `Waiting` in the stored pool), so the receiver finds the slot its own without asking, and
/// starts disrupting only after the giver was done. Judged from the agents' own logs.
#[test]
fn a_slot_given_back_is_handed_on_to_the_next_member_through_the_webhook() {
    use gpuplane_e2e::agent::{disruptive_writes, epoch_now, log_time, Agent, AgentOpts};
    use gpuplane_e2e::fleet::{node_host_file, partition, server};
    use gpuplane_e2e::kube::ready_for_generation;
    let t0 = Instant::now();
    let c = Cluster::start("webhook-pool");
    let (mut webhook, _) = agent_webhook(&c, "Fail");
    let pool = r#"{"apiVersion":"gpuplane.dev/v1alpha1","kind":"GpuNodePool","metadata":{"name":"fleet"},"spec":{"maxUnavailable":1}}"#;
    wait_for("the webhook to admit", Duration::from_secs(30), || {
        let o = c.cp.kubectl(&["apply", "-f", "-"]).stdin(pool).run();
        o.success.then_some(()).ok_or(o.stderr)
    });
    let nodes = ["kpro6", "other"];
    // Both members' partitions and servers, the servers serving `served`.
    let objects = |served: &str| {
        let mut items = vec![];
        for n in nodes {
            let mut p = partition(n, true);
            p["metadata"]["labels"]["gpuplane.dev/pool"] = "fleet".into();
            let mut s = server(&format!("qwen-{n}"), "default", n, true);
            s["spec"]["model"]["servedName"] = served.into();
            items.extend([p, s]);
        }
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
    };
    c.k_stdin(&["apply", "-f", "-"], &objects("qwen-a"));
    let agents: Vec<Agent> = nodes
        .iter()
        .map(|n| {
            let token = agent_token(&c, Some(&format!("agent-{n}")));
            let kc = kubeconfig_with(&c, &token, &format!("{n}.kubeconfig"));
            let o = AgentOpts {
                drift_interval: 30,
                lease_duration: 6,
            };
            let host = node_host_file(&c.cp, n);
            Agent::start_on_with_kubeconfig(&c.cp, n, n, &host, o, &kc)
        })
        .collect();
    let all_ready = || -> Result<(), String> {
        for n in nodes {
            let s = c.json(&[
                "get",
                "inferenceserver",
                &format!("qwen-{n}"),
                "-n",
                "default",
            ]);
            ready_for_generation(&s).map_err(|e| format!("qwen-{n}: {e}"))?;
        }
        Ok(())
    };
    wait_for("both servers Ready", Duration::from_secs(180), all_ready);

    let from = epoch_now();
    c.k_stdin(&["apply", "-f", "-"], &objects("qwen-b"));
    wait_for("both servers updated", Duration::from_secs(180), all_ready);
    let texts: Vec<String> = agents.iter().map(|a| a.log_text()).collect();
    let after = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| log_time(l).is_some_and(|x| x >= from))
            .map(str::to_string)
            .collect()
    };
    let lines: Vec<Vec<String>> = texts.iter().map(|t| after(t)).collect();
    for (n, ls) in nodes.iter().zip(&lines) {
        assert!(
            !ls.iter()
                .any(|l| l.contains("handing the slot on was refused")),
            "the webhook refused {n}'s hand-on:\n{}",
            ls.join("\n")
        );
    }
    // The giver: the member whose log says it handed the slot on, and to whom.
    let (giver, to, handed_at) = nodes
        .iter()
        .zip(&lines)
        .find_map(|(n, ls)| {
            let l = ls.iter().find(|l| l.contains("pool slot handed on"))?;
            let to = l.split_whitespace().find_map(|w| w.strip_prefix("to="))?;
            Some((*n, to.trim_matches('"').to_string(), log_time(l)?))
        })
        .unwrap_or_else(|| panic!("no member handed its slot on:\n{}", texts.join("\n")));
    let receiver = nodes.iter().position(|n| *n != giver).unwrap();
    assert_eq!(to, nodes[receiver], "the slot went to the other member");
    let disruptive_at = |ls: &[String]| disruptive_writes(ls.iter().map(String::as_str));
    let giver_i = 1 - receiver;
    let (g, r) = (&lines[giver_i], &lines[receiver]);
    assert!(
        disruptive_at(g).iter().all(|t| *t < handed_at),
        "{giver} wrote to its host after it handed the slot on:\n{}",
        g.join("\n")
    );
    let first = disruptive_at(r);
    assert!(
        !first.is_empty() && first.iter().all(|t| *t > handed_at),
        "{to} restarted its server before the slot was handed to it:\n{}",
        r.join("\n")
    );
    assert!(
        !r.iter().any(|l| l.contains("pool slot granted")),
        "{to} asked for the slot it was handed:\n{}",
        r.join("\n")
    );
    assert!(
        r.iter().any(|l| l.contains("pool slot released")),
        "{}",
        r.join("\n")
    );
    eprintln!(
        "[kube_webhook] {giver} handed its slot on to {to} through the webhook; {to}'s first disruptive write {:.0} ms after",
        (first[0] - handed_at) * 1000.0
    );
    drop(agents);
    webhook.kill().ok();
    webhook.wait().ok();
    report_duration(
        "a_slot_given_back_is_handed_on_to_the_next_member_through_the_webhook",
        t0,
    );
}

/// Issue 37 on the real API server: the agent of kpro6 may neither clear the pool's failure (a
/// person's to remove) nor give node other's member a slot nor free it; its own member's entry
/// it may write.
fn pool_status_is_guarded(c: &Cluster, mine: &Path) {
    // Node other's partition is the pool's one member (kpro6's stays out: its running agent
    // would write the pool's status meanwhile).
    c.k(&[
        "label",
        "gpupartition",
        "other",
        "gpuplane.dev/pool=fleet",
        "--overwrite",
    ]);
    let pool = r#"{"apiVersion":"gpuplane.dev/v1alpha1","kind":"GpuNodePool","metadata":{"name":"fleet"},"spec":{"maxUnavailable":1}}"#;
    c.k_stdin(&["apply", "-f", "-"], pool);
    let path = "/apis/gpuplane.dev/v1alpha1/gpunodepools/fleet/status";
    let put = |who: Option<&Path>, status: serde_json::Value| {
        let mut p = c.json(&["get", "gpunodepool", "fleet"]);
        p["status"] = status;
        let args = ["replace", "--raw", path, "-f", "-"];
        let o = match who {
            Some(k) => c.cp.kubectl_as(k, &args),
            None => c.cp.kubectl(&args),
        }
        .stdin(&p.to_string())
        .run();
        (o.success, format!("{}{}", o.stdout, o.stderr))
    };
    let slot = |node: &str| serde_json::json!({"member": node, "node": node, "reason": "restart", "since": "2026-12-05T08:00:00Z"});
    let failure = serde_json::json!({"member": "other", "node": "other", "step": "write unit", "reason": "ApplyFailed", "message": "No space left on device", "since": "2026-12-05T08:00:00Z"});
    // The admin (a person) writes the paused state: not judged.
    let (ok, said) = put(
        None,
        serde_json::json!({"slots": [slot("other")], "failure": failure}),
    );
    assert!(ok, "{said}");
    // The agent clears the failure: refused.
    let (ok, said) = put(Some(mine), serde_json::json!({"slots": [slot("other")]}));
    assert!(
        !ok && said.contains("may not clear or change the pool's failure"),
        "{said}"
    );
    // The agent frees node other's slot: refused (once the webhook's cache has the label; a
    // write admitted before that is undone by the admin's state written again).
    let paused = serde_json::json!({"slots": [slot("other")], "failure": failure});
    wait_for(
        "the webhook knows the pool's member",
        Duration::from_secs(30),
        || {
            let (ok, said) = put(
                Some(mine),
                serde_json::json!({"slots": [], "failure": failure}),
            );
            if !ok && said.contains("may not free or change node other's slot") {
                return Ok(());
            }
            assert!(put(None, paused.clone()).0);
            Err(said)
        },
    );
    // The agent gives itself a slot, though its partition is no member: refused.
    let (ok, said) = put(
        Some(mine),
        serde_json::json!({"slots": [slot("other"), slot("kpro6")], "failure": failure}),
    );
    assert!(
        !ok && said.contains("is not a member of this pool"),
        "{said}"
    );
    // Its own member's entry: admitted.
    let (ok, said) = put(
        Some(mine),
        serde_json::json!({"slots": [slot("other")], "failure": failure,
            "members": [{"name": "kpro6", "node": "kpro6", "state": "Waiting", "waitingFor": "a disruption slot"}]}),
    );
    assert!(ok, "{said}");
    eprintln!("[kube_webhook] the pool's failure, another node's slot and a slot while paused were refused to the agent");
}

/// The webhook's peak resident memory (VmHWM of /proc/PID/status), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("webhook status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// `e2e/kube/webhook-flood.py` with `args`, from 127.0.0.2 (a pod's address, not the API
/// server's); it runs until dropped.
struct Flood(Child);

impl Flood {
    fn start(c: &Cluster, args: &[&str]) -> Flood {
        Flood::start_from(c, "127.0.0.2", args)
    }

    /// [`Flood::start`] from the loopback address `source` (another network: `127.0.3.2`).
    fn start_from(c: &Cluster, source: &str, args: &[&str]) -> Flood {
        let name = format!("flood-{}-{source}.log", args[0]);
        let log = std::fs::File::create(c.cp.run.join(name)).unwrap();
        let child = Command::new("python3")
            .arg(repo_path("e2e/kube/webhook-flood.py"))
            .env("FLOOD_SOURCE", source)
            .args(args)
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        Flood(child)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// What an agent token of node kpro6 may still do, and not do, while the webhook is flooded:
/// its spec patch is refused (denied, or failing closed), its finalizer patch passes (the
/// webhook still answers the API server), and a status write for node other's partition is
/// refused. Returns how long the finalizer patch took.
fn the_agent_rules_hold(c: &Cluster, mine: &Path, during: &str) -> Duration {
    let patch = |p: &str| {
        as_agent(
            c,
            mine,
            &["patch", "gpupartition", "kpro6", "--type", "merge", "-p", p],
        )
    };
    let (ok, said) = patch(r#"{"spec":{"deletionPolicy":"Restore"}}"#);
    assert!(
        !ok && (said.contains("may change only finalizers and status")
            || said.contains("failed calling webhook")),
        "{during}: the agent's spec patch was admitted: {said}"
    );
    let t = Instant::now();
    let (ok, said) = patch(r#"{"metadata":{"finalizers":["gpuplane.dev/test"]}}"#);
    let took = t.elapsed();
    assert!(
        ok,
        "{during}: the webhook did not answer the API server: {said}"
    );
    let (ok, said) = patch(r#"{"metadata":{"finalizers":null}}"#);
    assert!(ok, "{during}: {said}");
    // A status write for the other node's partition, through the status subresource.
    // (Its resourceVersion kept: the status subresource insists; nothing else writes it here.)
    let mut other = c.json(&["get", "gpupartition", "other"]);
    other["status"] = serde_json::json!({"conditions": [{"type": "Ready", "status": "True",
        "reason": "Converged", "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}]});
    let file = c.cp.run.join("other-status.json");
    std::fs::write(&file, other.to_string()).unwrap();
    let (ok, said) = as_agent(
        c,
        mine,
        &[
            "replace",
            "--raw",
            "/apis/gpuplane.dev/v1alpha1/gpupartitions/other/status",
            "-f",
            &file.display().to_string(),
        ],
    );
    assert!(
        !ok && said.contains("status of this object belongs to node other"),
        "{during}: the agent wrote another node's status: {said}"
    );
    took
}

/// Issue 37 on the real API server: five networks each holding 64 idle connections (320, more
/// than the webhook's 256 slots) starve nothing — the API server's address is a trusted peer
/// with slots of its own, so reviews are answered and the agent renews its Lease; and with the
/// webhook frozen (SIGSTOP), a Lease renewal still passes (renewals fail open; a Lease's
/// creation, the step a thief needs, still fails closed).
fn lease_renewals_survive(c: &Cluster, mine: &Path, webhook: &mut Webhook, port: &str) {
    let lease = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"gpuplane-node-kpro6","namespace":"gpuplane-system","labels":{"gpuplane.dev/node":"kpro6"}},"spec":{"holderIdentity":"agent-kpro6","leaseDurationSeconds":15}}"#;
    let o =
        c.cp.kubectl_as(mine, &["create", "-f", "-"])
            .stdin(lease)
            .run();
    assert!(o.success, "the agent creates its Lease: {}", o.stderr);
    // A renewal as the agent makes it: an update of its Lease (its RBAC grants get and update).
    let renew = |n: u32| {
        let mut l = c.json(&[
            "get",
            "lease",
            "gpuplane-node-kpro6",
            "-n",
            "gpuplane-system",
        ]);
        l["spec"]["leaseTransitions"] = n.into();
        let t = Instant::now();
        let o =
            c.cp.kubectl_as(mine, &["replace", "-f", "-"])
                .stdin(&l.to_string())
                .run();
        (o.success, format!("{}{}", o.stdout, o.stderr), t.elapsed())
    };
    let floods: Vec<Flood> = (1..=5)
        .map(|n| Flood::start_from(c, &format!("127.0.{n}.2"), &["idle", port, "64"]))
        .collect();
    // Until the floods hold every slot but the API server's (192 of 256): each prints "held N"
    // once its connections are open.
    let held = || -> Vec<usize> {
        (1..=5)
            .map(|n| {
                let f = c.cp.run.join(format!("flood-idle-127.0.{n}.2.log"));
                let t = std::fs::read_to_string(f).unwrap_or_default();
                let last = t.lines().last().unwrap_or_default();
                last.trim_start_matches("held ").parse().unwrap_or(0)
            })
            .collect()
    };
    wait_for(
        "the floods hold the general slots",
        Duration::from_secs(120),
        || {
            let h = held();
            if h.iter().sum::<usize>() >= 192 {
                Ok(())
            } else {
                Err(format!("held {h:?}"))
            }
        },
    );
    let held = held();
    let took = the_agent_rules_hold(c, mine, "under five networks of 64 idle connections");
    let (ok, said, renewed) = renew(1);
    assert!(ok, "the Lease renewal under the flood: {said}");
    eprintln!(
        "[kube_webhook] five networks held {held:?}; the agent's finalizer patch took {:.2}s, its Lease renewal {:.2}s",
        took.as_secs_f64(),
        renewed.as_secs_f64()
    );
    drop(floods);
    // The webhook frozen: renewals pass (after the webhook's 5 s timeout), another node's Lease
    // is still not created.
    let pid = webhook.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let (ok, said, renewed) = renew(2);
    let theirs = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"gpuplane-node-other","namespace":"gpuplane-system","labels":{"gpuplane.dev/node":"other"}},"spec":{"holderIdentity":"thief"}}"#;
    let created =
        c.cp.kubectl_as(mine, &["create", "-f", "-"])
            .stdin(theirs)
            .run();
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    assert!(ok, "a Lease renewal with the webhook frozen: {said}");
    assert!(
        !created.success,
        "another node's Lease was created with the webhook frozen"
    );
    eprintln!(
        "[kube_webhook] with the webhook frozen the Lease renewal passed in {:.2}s; another node's Lease was refused",
        renewed.as_secs_f64()
    );
}

/// Issue 23 on the real API server: a pod flooding the webhook (300 idle TLS connections, then
/// 8 concurrent 3 MiB bodies) neither gets a stolen agent token's spec patch admitted nor keeps
/// the webhook from answering the API server, and the webhook stays under its 128 Mi limit. An
/// agent token's status write for another node's object is refused throughout.
#[test]
fn the_agent_rules_fail_closed_and_hold_under_a_flood_within_the_memory_limit() {
    let t0 = Instant::now();
    let c = Cluster::start("webhook-flood");
    let (mut webhook, port) = agent_webhook(&c, "Ignore");
    let other = other_partition();
    wait_for("the webhook to admit", Duration::from_secs(30), || {
        let o = c.cp.kubectl(&["apply", "-f", "-"]).stdin(&other).run();
        o.success.then_some(()).ok_or(o.stderr)
    });
    c.apply("examples/kpro6/partition.yaml");
    let mine = kubeconfig_with(
        &c,
        &agent_token(&c, Some("agent-kpro6")),
        "kpro6.kubeconfig",
    );
    let quiet = the_agent_rules_hold(&c, &mine, "without a flood");

    let port_s = port.to_string();
    let idle = Flood::start(&c, &["idle", &port_s, "300"]);
    std::thread::sleep(Duration::from_secs(5));
    let under_idle = the_agent_rules_hold(&c, &mine, "under 300 idle connections");
    let held =
        std::fs::read_to_string(c.cp.run.join("flood-idle-127.0.0.2.log")).unwrap_or_default();
    eprintln!(
        "[kube_webhook] flood: {}",
        held.lines().last().unwrap_or("no output")
    );
    drop(idle);

    let bodies = Flood::start(&c, &["bodies", &port_s, "8", "3"]);
    std::thread::sleep(Duration::from_secs(5));
    let under_bodies = the_agent_rules_hold(&c, &mine, "under 8 concurrent 3 MiB bodies");
    std::thread::sleep(Duration::from_secs(5));
    let sent =
        std::fs::read_to_string(c.cp.run.join("flood-bodies-127.0.0.2.log")).unwrap_or_default();
    drop(bodies);
    let peak = peak_rss_kib(webhook.id());
    eprintln!(
        "[kube_webhook] the agent's finalizer patch took {:.2}s quiet, {:.2}s under 300 idle connections, {:.2}s under 8 × 3 MiB bodies ({}); the webhook's peak RSS {:.1} MiB",
        quiet.as_secs_f64(),
        under_idle.as_secs_f64(),
        under_bodies.as_secs_f64(),
        sent.lines().last().unwrap_or("no output"),
        peak as f64 / 1024.0
    );
    assert!(
        peak < 128 * 1024,
        "the webhook's peak RSS {peak} KiB is over its 128 Mi limit"
    );
    assert!(
        under_idle < Duration::from_secs(5) && under_bodies < Duration::from_secs(5),
        "{under_idle:?} {under_bodies:?}"
    );
    lease_renewals_survive(&c, &mine, &mut webhook, &port_s);
    webhook.kill().ok();
    webhook.wait().ok();
    report_duration(
        "the_agent_rules_fail_closed_and_hold_under_a_flood_within_the_memory_limit",
        t0,
    );
}
