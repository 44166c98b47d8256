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
# The health capture (issue 40) asked more fields, the agent's seven first: those columns of its
# rows, without the header.
if [ -f "$cap/cmd/nvidia-smi-health.csv" ]; then
  tail -n +2 "$cap/cmd/nvidia-smi-health.csv" | cut -d, -f1-7 >"$dir/bin/nvidia-smi-ecc.csv"
fi
cat >"$dir/bin/nvidia-smi" <<'SMI'
#!/bin/sh
# The captured answers to LocalHost's identity and ECC queries; any other question fails.
d=$(dirname "$0")
case "$*" in
  "--query-gpu=pci.bus_id,uuid,serial --format=csv,noheader") exec cat "$d/nvidia-smi.csv" ;;
  "--query-gpu=pci.bus_id,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv,noheader")
    [ -f "$d/nvidia-smi-ecc.csv" ] && exec cat "$d/nvidia-smi-ecc.csv" ;;
esac
exit 2
SMI
chmod +x "$dir/bin/nvidia-smi"
