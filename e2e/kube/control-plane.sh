#!/bin/bash
# A real, minimal Kubernetes control plane for gpuplane's end-to-end tests: etcd and kube-apiserver
# (v1.20.2, built by e2e/setup/kube-build.sh) on loopback, TLS, static-token authentication and RBAC
# authorization. No controller-manager, scheduler or kubelet: enough for CRDs, custom resources,
# status, server-side apply, watches, events, leases and RBAC.
#
# Usage: control-plane.sh COMMAND
#   start              start etcd and kube-apiserver, wait for /readyz, write the kubeconfigs and
#                      print the admin kubeconfig path. Fails if RUN already holds a running instance.
#   stop               stop both and delete RUN
#   restart-apiserver  stop kube-apiserver and start it again (same flags, certs, tokens, port)
#   restart-all        stop kube-apiserver and etcd, start both again; etcd keeps its data
#   stop-apiserver | start-apiserver | stop-etcd | start-etcd
#                      the individual steps, to keep a component down for a while in a test
#   status             print which components run (exit 1 if either is down)
#   env                print $RUN/env (see below)
#
# Environment (read by `start`, which records the ports and extra flags in RUN; the other commands
# only need RUN):
#   RUN                       state directory (default /tmp/gpuplane-kube); one instance per RUN
#   KUBE_APISERVER_PORT       HTTPS port of kube-apiserver (default 26443)
#   ETCD_PORT                 etcd client port (default 23790); etcd's peer port is ETCD_PEER_PORT
#                             (default ETCD_PORT+1). Several instances need distinct RUN and ports.
#   STOP_SIGNAL               signal used to stop components (default TERM; KILL for a crash)
#   READY_TIMEOUT             seconds to wait for /readyz (default 90)
#   AGENT_USER, AGENT_GROUPS  identity of the non-admin token (default gpuplane-agent, group
#                             gpuplane:agents). A ServiceAccount's name, e.g.
#                             system:serviceaccount:gpuplane-system:gpuplane-agent, makes RBAC
#                             bindings to that ServiceAccount apply to it.
#   KUBE_APISERVER_EXTRA_ARGS extra flags for kube-apiserver (word-split)
#   KUBE_APISERVER, ETCD      binaries (default: $GPUPLANE_E2E_CACHE/kube/bin/kube-apiserver,
#                             GPUPLANE_E2E_CACHE defaulting to /var/cache/gpuplane-e2e; etcd on PATH)
#   CRD_SERVER=1              run Kubernetes' CRD server (apiextensions-apiserver, the newest
#                             Debian sid ships, built by e2e/setup/kube-cel-build.sh; binaries from
#                             $GPUPLANE_E2E_CACHE/kube-cel/bin) instead of kube-apiserver 1.20: CRDs,
#                             their CEL rules and server-side apply only (no namespaces, RBAC,
#                             leases, events or webhooks). Authentication by client certificate
#                             (the admin's: group system:masters, which needs no authorizer); its
#                             /readyz stays unready (it waits on a Service informer), so `start`
#                             waits on the CRD endpoint instead. The server listens on
#                             CRD_SERVER_PORT (default KUBE_APISERVER_PORT+2); KUBE_APISERVER_PORT
#                             is its discovery front (e2e/kube/discovery-front), which serves the
#                             /api and /apis discovery kubectl needs and passes the rest on.
#
# Files in RUN: kubeconfig (admin, group system:masters), agent.kubeconfig (AGENT_USER, no
# permissions until a test binds some), ca.crt (trust anchor of the serving certificate, also
# embedded in both kubeconfigs), env (KEY=value lines: KUBE_APISERVER_URL, ADMIN_TOKEN, AGENT_TOKEN,
# AGENT_USER, KUBECONFIG, AGENT_KUBECONFIG, CA_CERT, ETCD_URL), etcd.log, kube-apiserver.log.
set -euo pipefail

RUN=$(realpath -m "${RUN:-/tmp/gpuplane-kube}")
PORT=${KUBE_APISERVER_PORT:-26443}
EPORT=${ETCD_PORT:-23790}
EPEER=${ETCD_PEER_PORT:-$((EPORT + 1))}
SIG=${STOP_SIGNAL:-TERM}
READY_TIMEOUT=${READY_TIMEOUT:-90}
AGENT_USER=${AGENT_USER:-gpuplane-agent}
AGENT_GROUPS=${AGENT_GROUPS:-gpuplane:agents}
CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}
CRD_SERVER=${CRD_SERVER:-0}
FRONT=${DISCOVERY_FRONT:-$CACHE/kube-cel/bin/discovery-front}
if [ "$CRD_SERVER" = 1 ]; then
  KUBE_APISERVER=${KUBE_APISERVER:-$CACHE/kube-cel/bin/apiextensions-apiserver}
  ETCD=${ETCD:-$CACHE/kube-cel/bin/etcd}
  BUILD_SCRIPT=e2e/setup/kube-cel-build.sh
else
  KUBE_APISERVER=${KUBE_APISERVER:-$CACHE/kube/bin/kube-apiserver}
  ETCD=${ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
  BUILD_SCRIPT=e2e/setup/kube-build.sh
fi
URL=https://127.0.0.1:$PORT

log() { printf '[control-plane %s] %s\n' "$RUN" "$*" >&2; }
die() { log "$*"; exit 1; }

# --- processes -------------------------------------------------------------------------------------
# pid of a component if it is alive and really ours (its command line names RUN), else nothing.
pid_of() {
  local f=$RUN/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$RUN/" || return 1
  # A zombie is not alive.
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}

# why_dead NAME: what pid_of saw of NAME, on stderr (a start once called a live, just-started
# kube-apiserver dead: this says which of pid_of's checks failed, next time).
why_dead() {
  local pid
  pid=$(cat "$RUN/$1.pid" 2>/dev/null || true)
  {
    echo "[control-plane] $1 looks dead: pid file ${pid:-(none)}"
    [ -n "$pid" ] || return 0
    echo "  /proc/$pid: $([ -d "/proc/$pid" ] && echo present || echo absent)"
    echo "  stat: $(cut -d' ' -f1-3 "/proc/$pid/stat" 2>/dev/null)"
    echo "  cmdline: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | cut -c1-300)"
  } >&2
}

stop_component() {
  local name=$1 pid i
  if pid=$(pid_of "$name"); then
    kill "-$SIG" "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do pid_of "$name" >/dev/null || break; sleep 0.1; done
    if pid_of "$name" >/dev/null; then
      log "$name ($pid) did not stop on SIG$SIG within 10s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do pid_of "$name" >/dev/null || break; sleep 0.1; done
    fi
  fi
  rm -f "$RUN/$name.pid"
}

# alive_or_die NAME WHAT: returns while NAME runs; else dies "WHAT exited", after what pid_of saw
# (why_dead) and the tail of NAME's log.
alive_or_die() {
  pid_of "$1" >/dev/null && return 0
  why_dead "$1"
  tail -30 "$RUN/$1.log" >&2 || true
  die "$2 exited (log: $RUN/$1.log)"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Starts "$@" detached (own session, no inherited stdio, so callers that capture our output do not
# wait for it), logging to $RUN/$name.log.
spawn() {
  local name=$1 i; shift
  setsid "$@" </dev/null >>"$RUN/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
  # Until the background subshell has exec'd the component, its command line does not name RUN
  # and pid_of would take it for dead (a race seen on loaded machines): wait for the exec, up to
  # 60 s. (A loaded run once called the CRD server's discovery front dead within 1.5 s, its log
  # empty; why is not known: wait_crds now says what pid_of saw, with why_dead.)
  for i in $(seq 1 1200); do
    pid_of "$name" >/dev/null && return 0
    [ -d "/proc/$!" ] || return 0
    sleep 0.05
  done
}

# --- one-time setup of RUN -------------------------------------------------------------------------
init_run() {
  command -v openssl >/dev/null || die "openssl missing (run e2e/setup/kube-build.sh)"
  command -v curl >/dev/null || die "curl missing (run e2e/setup/kube-build.sh)"
  mkdir -p "$RUN"
  cd "$RUN"
  [ -f ca.crt ] && [ -f tokens.csv ] && return 0
  # What later commands (restart-*, start-*) need to start the components the same way again.
  printf 'PORT=%q\nEPORT=%q\nEPEER=%q\nKUBE_APISERVER_EXTRA_ARGS=%q\nCRD_SERVER=%q\nCRD_SERVER_PORT=%q\n' \
    "$PORT" "$EPORT" "$EPEER" "${KUBE_APISERVER_EXTRA_ARGS:-}" "$CRD_SERVER" "${CRD_SERVER_PORT:-$((PORT + 2))}" >config
  # A private CA and a serving certificate for 127.0.0.1/localhost and the in-cluster names.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -keyout ca.key -out ca.crt -subj "/CN=gpuplane-e2e-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    >apiserver.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile apiserver.ext -out apiserver.crt 2>/dev/null
  rm -f apiserver.csr apiserver.ext ca.srl
  # Service-account token signing key (the apiserver insists on one).
  openssl genrsa -out sa.key 2048 2>/dev/null
  # Static tokens: token,user,uid,"group1,group2"
  ADMIN_TOKEN=$(openssl rand -hex 24)
  AGENT_TOKEN=$(openssl rand -hex 24)
  {
    echo "$ADMIN_TOKEN,gpuplane-e2e-admin,gpuplane-e2e-admin,\"system:masters\""
    echo "$AGENT_TOKEN,$AGENT_USER,$AGENT_USER,\"$AGENT_GROUPS\""
  } >tokens.csv
  chmod 600 tokens.csv ca.key apiserver.key sa.key
  local ca_data
  ca_data=$(base64 -w0 ca.crt)
  write_kubeconfig kubeconfig gpuplane-e2e-admin "    token: $ADMIN_TOKEN" "$ca_data"
  if [ "$CRD_SERVER" = 1 ]; then admin_certificate "$ca_data"; fi
  write_kubeconfig agent.kubeconfig "$AGENT_USER" "    token: $AGENT_TOKEN" "$ca_data"
  cat >env <<EOF
KUBE_APISERVER_URL=$URL
ADMIN_TOKEN=$ADMIN_TOKEN
AGENT_TOKEN=$AGENT_TOKEN
AGENT_USER=$AGENT_USER
KUBECONFIG=$RUN/kubeconfig
AGENT_KUBECONFIG=$RUN/agent.kubeconfig
CA_CERT=$RUN/ca.crt
ETCD_URL=http://127.0.0.1:$EPORT
EOF
}

write_kubeconfig() { # file user credentials ca-data (credentials: the user's YAML lines, indented 4)
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpuplane-e2e
  cluster:
    server: $URL
    certificate-authority-data: $4
users:
- name: $2
  user:
$3
contexts:
- name: gpuplane-e2e
  context:
    cluster: gpuplane-e2e
    user: $2
    namespace: default
current-context: gpuplane-e2e
EOF
  chmod 600 "$1"
}

# The CRD server knows no tokens: the admin's kubeconfig carries a client certificate instead
# (CN gpuplane-e2e-admin, O system:masters), signed by the CA the server trusts (--client-ca-file).
admin_certificate() { # ca-data
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=gpuplane-e2e-admin" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=clientAuth" >admin.ext
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile admin.ext -out admin.crt 2>/dev/null
  rm -f admin.csr admin.ext ca.srl
  chmod 600 admin.key
  write_kubeconfig kubeconfig gpuplane-e2e-admin "    client-certificate-data: $(base64 -w0 admin.crt)
    client-key-data: $(base64 -w0 admin.key)" "$1"
}

admin_token() { sed -n 's/^ADMIN_TOKEN=//p' "$RUN/env"; }

# --- etcd ------------------------------------------------------------------------------------------
start_etcd() {
  [ -x "$ETCD" ] || die "etcd not found (run e2e/setup/kube-build.sh, which installs etcd-server)"
  pid_of etcd >/dev/null && { log "etcd already running"; return 0; }
  port_busy "$EPORT" && die "port $EPORT (etcd client) is in use; set ETCD_PORT"
  port_busy "$EPEER" && die "port $EPEER (etcd peer) is in use; set ETCD_PEER_PORT"
  spawn etcd "$ETCD" --name gpuplane-e2e --data-dir "$RUN/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$EPORT" --advertise-client-urls "http://127.0.0.1:$EPORT" \
    --listen-peer-urls "http://127.0.0.1:$EPEER" --initial-advertise-peer-urls "http://127.0.0.1:$EPEER" \
    --initial-cluster "gpuplane-e2e=http://127.0.0.1:$EPEER" --initial-cluster-state new
  local i
  for i in $(seq 1 $((READY_TIMEOUT * 5))); do
    curl -sf "http://127.0.0.1:$EPORT/health" 2>/dev/null | grep -q '"health":"true"' && return 0
    alive_or_die etcd etcd
    sleep 0.2
  done
  tail -20 "$RUN/etcd.log" >&2
  die "etcd not healthy after ${READY_TIMEOUT}s (log: $RUN/etcd.log)"
}

# --- kube-apiserver --------------------------------------------------------------------------------
start_apiserver() {
  [ -x "$KUBE_APISERVER" ] || die "$KUBE_APISERVER missing (run e2e/setup/kube-build.sh)"
  pid_of kube-apiserver >/dev/null && { log "kube-apiserver already running"; return 0; }
  port_busy "$PORT" && die "port $PORT (kube-apiserver) is in use; set KUBE_APISERVER_PORT"
  local extra=()
  # shellcheck disable=SC2206
  [ -n "${KUBE_APISERVER_EXTRA_ARGS:-}" ] && extra=($KUBE_APISERVER_EXTRA_ARGS)
  if [ "$CRD_SERVER" = 1 ]; then
    local inner=${CRD_SERVER_PORT:-$((PORT + 2))}
    port_busy "$inner" && die "port $inner (the CRD server behind its front) is in use; set CRD_SERVER_PORT"
    spawn kube-apiserver "$KUBE_APISERVER" \
      --etcd-servers "http://127.0.0.1:$EPORT" \
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$inner" \
      --tls-cert-file "$RUN/apiserver.crt" --tls-private-key-file "$RUN/apiserver.key" \
      --client-ca-file "$RUN/ca.crt" --authentication-skip-lookup \
      --authentication-kubeconfig "$RUN/kubeconfig" --authorization-kubeconfig "$RUN/kubeconfig" \
      --kubeconfig "$RUN/kubeconfig" \
      --disable-admission-plugins=NamespaceLifecycle,MutatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook \
      --enable-priority-and-fairness=false --profiling=false \
      "${extra[@]}"
    [ -x "$FRONT" ] || die "$FRONT missing (run $BUILD_SCRIPT)"
    spawn discovery-front "$FRONT" -listen "127.0.0.1:$PORT" -upstream "https://127.0.0.1:$inner" \
      -tls-cert-file "$RUN/apiserver.crt" -tls-private-key-file "$RUN/apiserver.key" \
      -client-ca-file "$RUN/ca.crt" -client-cert "$RUN/admin.crt" -client-key "$RUN/admin.key"
    wait_crds
    return
  fi
  spawn kube-apiserver "$KUBE_APISERVER" \
    --etcd-servers "http://127.0.0.1:$EPORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$PORT" --insecure-port 0 \
    --tls-cert-file "$RUN/apiserver.crt" --tls-private-key-file "$RUN/apiserver.key" \
    --token-auth-file "$RUN/tokens.csv" --authorization-mode RBAC \
    --service-account-key-file "$RUN/sa.key" --service-account-signing-key-file "$RUN/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-cluster-ip-range 10.0.0.0/24 \
    --profiling=false \
    "${extra[@]}"
  wait_ready
}

wait_ready() {
  local tok i
  tok=$(admin_token)
  for i in $(seq 1 $((READY_TIMEOUT * 4))); do
    [ "$(curl -s --cacert "$RUN/ca.crt" -H "Authorization: Bearer $tok" -o /dev/null -w '%{http_code}' "$URL/readyz" 2>/dev/null)" = 200 ] && return 0
    alive_or_die kube-apiserver kube-apiserver
    sleep 0.25
  done
  curl -s --cacert "$RUN/ca.crt" -H "Authorization: Bearer $tok" "$URL/readyz?verbose" >&2 || true
  die "kube-apiserver not ready after ${READY_TIMEOUT}s (log: $RUN/kube-apiserver.log)"
}

# The CRD server's /readyz never turns ready (no Service API to sync): ready is its CRD list.
wait_crds() {
  local i
  for i in $(seq 1 $((READY_TIMEOUT * 4))); do
    [ "$(curl -s --cacert "$RUN/ca.crt" --cert "$RUN/admin.crt" --key "$RUN/admin.key" -o /dev/null \
      -w '%{http_code}' "$URL/apis/apiextensions.k8s.io/v1/customresourcedefinitions" 2>/dev/null)" = 200 ] && return 0
    alive_or_die kube-apiserver "the CRD server"
    alive_or_die discovery-front "the discovery front"
    sleep 0.25
  done
  die "the CRD server did not list CRDs after ${READY_TIMEOUT}s (log: $RUN/kube-apiserver.log)"
}

# --- commands --------------------------------------------------------------------------------------
need_run() {
  [ -f "$RUN/env" ] && [ -f "$RUN/config" ] || die "no control plane in $RUN (run 'start' first)"
  # shellcheck disable=SC1091
  . "$RUN/config"
  URL=https://127.0.0.1:$PORT
}

case "${1:-}" in
  start)
    if [ -d "$RUN" ] && { pid_of etcd >/dev/null || pid_of kube-apiserver >/dev/null; }; then
      die "a control plane already runs in $RUN (stop it first)"
    fi
    [ -x "$KUBE_APISERVER" ] || die "$KUBE_APISERVER missing (run $BUILD_SCRIPT)"
    [ -x "$ETCD" ] || die "etcd not found at $ETCD (run $BUILD_SCRIPT)"
    init_run
    # Leave nothing running behind a failed start (RUN and its logs stay for inspection).
    started=0
    trap '[ "$started" = 1 ] || { stop_component discovery-front; stop_component kube-apiserver; stop_component etcd; }' EXIT
    start_etcd
    start_apiserver
    started=1
    log "ready at $URL (etcd http://127.0.0.1:$EPORT)"
    echo "$RUN/kubeconfig"
    ;;
  stop)
    if [ -d "$RUN" ]; then
      stop_component discovery-front
      stop_component kube-apiserver
      stop_component etcd
      rm -rf "$RUN"
    fi
    ;;
  restart-apiserver) need_run; stop_component discovery-front; stop_component kube-apiserver; start_apiserver ;;
  restart-all) need_run; stop_component discovery-front; stop_component kube-apiserver; stop_component etcd; start_etcd; start_apiserver ;;
  stop-apiserver) need_run; stop_component discovery-front; stop_component kube-apiserver ;;
  start-apiserver) need_run; start_apiserver ;;
  stop-etcd) need_run; stop_component etcd ;;
  start-etcd) need_run; start_etcd ;;
  status)
    need_run
    rc=0
    for c in etcd kube-apiserver; do
      if p=$(pid_of "$c"); then echo "$c: running (pid $p)"; else echo "$c: stopped"; rc=1; fi
    done
    exit $rc
    ;;
  env) need_run; cat "$RUN/env" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
