#!/bin/bash
# Runs inside the VM: what gpuplane observes of the IOMMU (boot with or without iommu=pt).
set -u
/usr/local/bin/gpuplane observe --host local --node-name vmhost --gpu-vendor 1234 --output json \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); print("IOMMU", json.dumps(d["iommu"], separators=(",",":"))); print("GPUS", json.dumps({a: v.get("iommuGroup") for a, v in d["pciDevices"].items() if v["class"].startswith("03")}, separators=(",",":")))'
