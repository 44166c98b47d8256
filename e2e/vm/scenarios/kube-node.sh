#!/bin/bash
# Runs inside the single-node Kubernetes VM (run.sh with VM_IMAGE=kube-node) as check.sh: the
# chart on a real kubelet node, as an operator would install it. Files in /usr/local/bin: helm,
# gpuplane-image.tar (packaging/image/build.sh), gpuplane-chart.tar (charts/gpuplane).
#
#   1. the API server answers and the node gpuhost is Ready
#   2. the image is imported into containerd (k8s.io namespace; no registry is reachable)
#   3. `helm install` of the chart; the agent DaemonSet's pod and the webhook's pod are Ready
#   4. `kubectl apply` of a GpuPartition for the stand-in GPUs: the pod rebinds them (read back
#      from sysfs) and the partition's Ready condition turns True
#   5. `kubectl delete` of the partition (deletionPolicy: Restore: the agent, still running, puts
#      every GPU back on its host driver and lets the object go), then `helm uninstall`: the
#      release's pods are gone, the CRDs stay (Helm never deletes crds/)
#
# Prints machine-readable lines for e2e/tests/vm_kube_node.rs: `PHASE name seconds` (each step's
# duration; `boot` is the uptime when the API server started), `DRV <bdf> <driver>`, `OK <what>`, and
# `FAIL <what>` followed by diagnostics (exit status 1).
set -u
export KUBECONFIG=/etc/kubernetes/admin.kubeconfig HOME=/root
export PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
NS=gpuplane-system
up() { cut -d' ' -f1 /proc/uptime; }
MARK=$(up)
phase() { local now; now=$(up); echo "PHASE $1 $(awk -v a="$MARK" -v b="$now" 'BEGIN{printf "%.1f", b-a}') (uptime ${now}s)"; MARK=$now; }
# until_ok SECONDS CMD...: CMD every 2 s until it succeeds, at most SECONDS.
until_ok() { local d=$(( $1 + $(date +%s) )); shift; until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -lt $d ] || return 1; sleep 2; done; }
drivers() { # TAG: one line per stand-in GPU
  for d in 0000:41:00.0 0000:42:00.0 0000:81:00.0 0000:82:00.0; do
    echo "$1 $d $(basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none)"
  done
}
fail() {
  echo "FAIL $1"
  systemctl --no-pager --plain list-units 'kube*' etcd.service containerd.service k8s-prep.service 2>&1 | head -20
  kubectl get nodes -o wide 2>&1; kubectl get pods -A -o wide 2>&1
  kubectl get events -A --sort-by=.lastTimestamp 2>&1 | tail -20
  kubectl -n $NS describe pods 2>&1 | tail -40
  for p in $(kubectl -n $NS get pods -o name 2>/dev/null); do echo "--- logs $p"; kubectl -n $NS logs "$p" --tail=40 2>&1; done
  for u in k8s-prep containerd kubelet kube-apiserver kube-controller-manager etcd; do
    echo "--- journal $u: starts, fatal and error lines"
    journalctl -u $u --no-pager -o short-monotonic 2>&1 | grep -E 'Started|Stopped|Failed|Main process|\]: [FE][0-9]{4} |panic|fatal' \
      | grep -v 'node "gpuhost" not found' | head -n 12 | cut -c1-300
    journalctl -u $u --no-pager -o cat 2>&1 | grep -E '^[FE][0-9]{4}|^panic|fatal error' | grep -v 'not found' | tail -n 8 | cut -c1-300
  done
  kubectl get gpupartitions -o yaml 2>&1 | tail -40
  drivers DRV-AT-FAILURE
  free -m
  exit 1
}
node_ready() { [ "$(kubectl get node gpuhost -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
# ready_pods COMPONENT: the release's pods of that component all Ready (at least one)
ready_pods() {
  local s
  s=$(kubectl -n $NS get pods -l "app.kubernetes.io/component=$1" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')
  [ -n "$s" ] && ! echo "$s" | grep -qv True
}
no_pods() { [ -z "$(kubectl -n $NS get pods -o name 2>/dev/null)" ]; }
partition_ready() { [ "$(kubectl get gpupartition gpuhost -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }

# The kubelet, controller-manager, scheduler and kube-proxy wait for the API server's readiness
# (wait-apiserver.sh) before they start, and multi-user.target for them, so this script starts
# after it: their start times say when the API server got ready.
started() { systemctl show -p ExecMainStartTimestampMonotonic --value "$1" | awk '{printf "%.1f", $1 / 1e6}'; }
echo "== 1. control plane and node (check started at uptime $(up)s)"
until_ok 600 kubectl get --raw /readyz || fail "the API server is not ready"
A=$(started kube-apiserver.service); K=$(started kubelet.service)
echo "PHASE boot $A (kernel and systemd, up to the API server's start)"
echo "PHASE apiserver_ready $(awk -v a="$A" -v k="$K" 'BEGIN{printf "%.1f", k-a}') (API server start to the kubelet's start)"
MARK=$K
until_ok 600 node_ready || fail "node gpuhost is not Ready"
phase node_ready
kubectl get nodes -o wide
kubectl version --short 2>/dev/null | sed 's/^/  /'

echo "== 2. image import"
ctr -n k8s.io images import /usr/local/bin/gpuplane-image.tar || fail "ctr images import"
ctr -n k8s.io images ls -q | grep -v '^sha256:' | sed 's/^/  image /'
phase image_import

echo "== 3. helm install"
mkdir -p /root/charts && tar xf /usr/local/bin/gpuplane-chart.tar -C /root/charts
helm version --short
# The image is only in containerd: never pull it. The stand-in GPUs are bochs-display devices
# (vendor 1234) whose host driver is bochs-drm.
helm install gpuplane /root/charts/gpuplane --namespace $NS --create-namespace \
  --set image.pullPolicy=Never --set-string agent.gpuVendor=1234 --set agent.gpuDriver=bochs-drm \
  --set agent.driftInterval=10 || fail "helm install"
until_ok 600 ready_pods agent || fail "the agent's pod is not Ready"
phase helm_install_to_agent_ready
until_ok 300 ready_pods webhook || fail "the webhook's pod is not Ready"
phase webhook_ready
kubectl -n $NS get daemonset,deployment,pods -o wide
AGENT=$(kubectl -n $NS get pods -l app.kubernetes.io/component=agent -o jsonpath='{.items[0].metadata.name}')
echo "OK agent-pod $AGENT privileged=$(kubectl -n $NS get pod "$AGENT" -o jsonpath='{.spec.containers[0].securityContext.privileged}') hostPID=$(kubectl -n $NS get pod "$AGENT" -o jsonpath='{.spec.hostPID}')"
echo "HOSTTOOL $(kubectl -n $NS exec "$AGENT" -- /opt/gpuplane/host-tools/systemctl is-system-running 2>&1 | head -1)"
drivers DRV-BEFORE

echo "== 4. kubectl apply of a GpuPartition"
cat >/root/partition.yaml <<'YAML'
apiVersion: gpuplane.dev/v1alpha1
kind: GpuPartition
metadata: {name: gpuhost, labels: {gpuplane.dev/node: gpuhost}}
spec:
  nodeName: gpuhost
  deletionPolicy: Restore
  slices:
    - name: host
      gpus: {addresses: ["0000:41:00.0", "0000:42:00.0"]}
      driver: nvidia
    - name: vm
      gpus: {numaNode: 1}
      driver: vfio-pci
YAML
kubectl apply -f /root/partition.yaml || fail "kubectl apply"
until_ok 600 partition_ready || fail "the partition did not turn Ready"
phase apply_to_ready
kubectl get gpupartitions
kubectl get gpupartition gpuhost -o jsonpath='{range .status.conditions[*]}CONDITION {.type} {.status} {.reason}{"\n"}{end}'
drivers DRV
echo "--- the agent's log (its writes)"
kubectl -n $NS logs "$AGENT" 2>&1 | grep -iE 'write|bind|vfio|driver_override|ready' | tail -12 | cut -c1-240

echo "== 5. delete the partition (deletionPolicy: Restore), then helm uninstall"
kubectl delete gpupartition gpuhost --timeout=600s || fail "kubectl delete gpupartition"
phase delete_to_restored
drivers DRV-AFTER
helm uninstall gpuplane --namespace $NS || fail "helm uninstall"
until_ok 300 no_pods || fail "the release's pods are still there"
phase helm_uninstall
echo "OK left: $(kubectl get crd -o name | grep -c gpuplane.dev) CRDs (Helm keeps crds/), $(kubectl get gpupartitions -o name | wc -l) partitions"
echo "--- memory (MiB)"; free -m | head -2
