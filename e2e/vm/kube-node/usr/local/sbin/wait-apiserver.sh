#!/bin/sh
# ExecStartPre of the components that talk to the API server: wait until it is ready, so that its
# start-up has the VM's two (emulated) CPUs to itself and nothing retries against it meanwhile.
until kubectl --kubeconfig=/etc/kubernetes/admin.kubeconfig --request-timeout=20s get --raw /readyz >/dev/null 2>&1; do
  sleep 5
done
