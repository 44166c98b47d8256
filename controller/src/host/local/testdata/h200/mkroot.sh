#!/bin/sh
# Builds a host root that gpuplane's real backend can observe from a folder capture.sh made
# (testdata/h200/<date>/): its root/ copied, the empty directories of dirs.txt and the symlinks
# of links.tsv made, the kernel's IOMMU log lines as /dev/kmsg (a file, under a test root), and
# bin/nvidia-smi, which answers the one query LocalHost asks as the machine did.
#   mkroot.sh CAPTURE DIR
#   GPUPLANE_NVIDIA_SMI=DIR/bin/nvidia-smi gpuplane observe --host local --host-root DIR
set -eu
cap=${1:?usage: mkroot.sh CAPTURE DIR}
dir=${2:?usage: mkroot.sh CAPTURE DIR}
mkdir -p "$dir"
cp -R "$cap/root/." "$dir/"
while read -r d; do mkdir -p "$dir$d"; done <"$cap/dirs.txt"
tab=$(printf '\t')
while IFS="$tab" read -r path target; do
  mkdir -p "$dir$(dirname "$path")"
  ln -s "$target" "$dir$path"
done <"$cap/links.tsv"
if [ -f "$cap/cmd/kmsg-iommu.txt" ]; then
  mkdir -p "$dir/dev"
  cp "$cap/cmd/kmsg-iommu.txt" "$dir/dev/kmsg"
fi
mkdir -p "$dir/bin"
cp "$cap/cmd/nvidia-smi-query.csv" "$dir/bin/nvidia-smi.csv"
cat >"$dir/bin/nvidia-smi" <<'SMI'
#!/bin/sh
# The captured answer to LocalHost's identity query; any other question fails.
[ "$*" = "--query-gpu=pci.bus_id,uuid,serial --format=csv,noheader" ] || exit 2
exec cat "$(dirname "$0")/nvidia-smi.csv"
SMI
chmod +x "$dir/bin/nvidia-smi"
