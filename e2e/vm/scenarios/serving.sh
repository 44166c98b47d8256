#!/bin/bash
# Runs inside the VM (as /usr/local/bin/check.sh): Prometheus finds the SGLang servers of the
# agent on manifest files on the real kernel (issue 27), e2e/tests/vm_serving.rs judges it.
#
# The agent (`gpuplane run --manifests`, a systemd unit, the real local backend) runs the SGLang
# stand-in as a real unit on the host slice {numaNode: 0} with enableMetrics; a real Prometheus
# (the host's Debian binary, installed into the VM as /usr/local/bin/prometheus) finds it only
# through the agent: `http_sd_configs` at /sd/servers (job sglang) and `file_sd_configs` on the
# agent's file (job sglang-file), scrapes the agent itself (job gpuplane-agent: the
# gpuplane_gpu_owner join), a stand-in of NVIDIA's dcgm-exporter (job dcgm: dcgm-exporter needs
# NVIDIA's DCGM and GPUs, so a small server of this script emits its three gauges the dashboard
# reads, in dcgm-exporter's shape, for the host slice's stand-in GPUs) and loads the chart's
# serving rules. For each spelling of SGLang's
# metric names (colon, underscore: a fresh Prometheus each) the script sends requests and
# evaluates every query of the serving dashboard. Then the server's manifest is removed: the
# agent stops and removes its unit and both jobs lose the target.
# Lines: TARGETS SPELLING JSON (sglang's and sglang-file's active targets), PANEL SPELLING
# ROWS TITLE (ROWS: series the panel's first query returned),
# VALUE SPELLING TITLE VALUE, GONE SECONDS JOB, AGENT-SD JSON, ERROR ...
set -u
. /usr/local/bin/scenario-lib.sh
B=/usr/local/bin
P=/var/lib/prom
install_standin; mkmodel /srv/models/tiny
mkdir -p /etc/pve/lxc /etc/pve/qemu-server /etc/pve/mapping
printf 'name: guest\nhostpci0: mapping=emu-vm,pcie=1\n' > /etc/pve/qemu-server/300.conf
printf '# mappings kept by hand\n' > /etc/pve/mapping/pci.cfg
FILE_SD=/var/lib/gpuplane/prometheus/servers.json
# spec SPELLING: the partition and the server with its metrics spelled SPELLING, into $M/live
spec() {
  partition live '{numaNode: 0}' '{numaNode: 1}' vfio-pci "$VMC"
  server live "    - {name: STANDIN_METRICS_NAMES, value: $1}"
  sed -i 's/^  p2p: Disabled$/  p2p: Disabled\n  enableMetrics: true/' $M/live/server.yaml
}
# dcgm_standin: NOT dcgm-exporter: on 127.0.0.1:9400, the gauges DCGM_FI_DEV_GPU_UTIL,
# DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_POWER_USAGE of each stand-in GPU on NUMA node 0 (the host
# slice), labelled as dcgm-exporter labels its series (gpu, UUID, pci_bus_id as NVML spells it:
# an 8-digit domain and upper-case hex, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION).
dcgm_standin() { python3 - <<'PY' > /var/log/dcgm-standin.log 2>&1 &
import http.server, os
D = "/sys/bus/pci/devices/"
gpus = [a for a in sorted(os.listdir(D))
        if open(D + a + "/vendor").read().strip() == "0x1234" and open(D + a + "/numa_node").read().strip() == "0"]
text = ""
for name, doc, value in (("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "37"),
                         ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "20480"),
                         ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "312.5")):
    text += "# HELP %s %s\n# TYPE %s gauge\n" % (name, doc, name)
    for i, a in enumerate(gpus):
        dom, rest = a.split(":", 1)
        bus = (dom.rjust(8, "0") + ":" + rest).upper()
        text += ('%s{gpu="%d",UUID="GPU-standin-%d",pci_bus_id="%s",device="nvidia%d",modelName="stand-in",'
                 'Hostname="vmhost",DCGM_FI_DRIVER_VERSION="590.44.01"} %s\n') % (name, i, i, bus, i, value)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 9400), H).serve_forever()
PY
}
dcgm_standin
spec colon
cat > /etc/systemd/system/gpuplane-e2e.service <<UNIT
[Unit]
Description=gpuplane on manifest files (the e2e serving story)
[Service]
ExecStart=$G run --manifests $M/live --status-dir /var/lib/gpuplane/status --metrics-addr 127.0.0.1:9464 --file-sd $FILE_SD --drift-interval 2 --poll-interval 1 $GP
UNIT
systemctl start gpuplane-e2e.service
# prom: a fresh Prometheus on 127.0.0.1:9090 (the old one stopped, its data removed)
prom() {
  pkill -x prometheus; sleep 1; rm -rf $P; mkdir -p $P/data
  cat > $P/prometheus.yml <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [$B/serving-rules.yaml]
scrape_configs:
  - job_name: gpuplane-agent
    static_configs: [{targets: ['127.0.0.1:9464']}]
  - job_name: sglang
    http_sd_configs: [{url: 'http://127.0.0.1:9464/sd/servers', refresh_interval: 1s}]
  - job_name: sglang-file
    file_sd_configs: [{files: ['$FILE_SD'], refresh_interval: 1s}]
  - job_name: dcgm
    static_configs: [{targets: ['127.0.0.1:9400']}]
EOF
  $B/prometheus --config.file=$P/prometheus.yml --storage.tsdb.path=$P/data \
    --web.listen-address=127.0.0.1:9090 > $P/log 2>&1 &
}
# check SPELLING: the targets, traffic, every panel
check() { python3 - "$1" <<'PY'
import json, sys, time, urllib.request, urllib.parse
spelling = sys.argv[1]
def get(url, body=None):
    r = urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=10)
    return r.read().decode()
def api(path):
    return json.loads(get("http://127.0.0.1:9090" + path))
def targets():
    t = api("/api/v1/targets?state=active")["data"]["activeTargets"]
    return [x for x in t if x["labels"]["job"] in ("sglang", "sglang-file")]
def wait(what, f, secs):
    end = time.time() + secs
    while True:
        try:
            v = f()
            if v:
                return v
        except Exception as e:
            last = e
        if time.time() > end:
            print("ERROR", spelling, "timed out waiting for", what); sys.exit(1)
        time.sleep(1)
ts = wait("both jobs' targets up", lambda: (lambda t: t if len(t) == 2 and all(x["health"] == "up" for x in t) else None)(targets()), 240)
print("TARGETS", spelling, json.dumps([{k: x[k] for k in ("scrapeUrl", "health", "labels")} for x in ts], separators=(",", ":")))
url = ts[0]["scrapeUrl"].rsplit("/", 1)[0]
# The agent restarts the server for a new spelling on its own time: a target Prometheus found up
# may be the old server, about to stop. Traffic goes to the server that spells its metrics so.
mark = "sglang:num_running_reqs" if spelling == "colon" else "sglang_num_running_reqs"
wait("the server spelling its metrics " + spelling, lambda: mark in get(url + "/metrics"), 240)
for _ in range(8):
    get(url + "/generate", json.dumps({"text": "hi"}).encode()); time.sleep(0.3)
def query(expr):
    return api("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]
for p in json.load(open("/usr/local/bin/serving-dashboard.json"))["panels"]:
    title, rows = p["title"], None
    for t in p["targets"]:
        r = wait("data for panel " + title, lambda: query(t["expr"]), 90)
        if rows is None:
            rows = len(r)
            print("VALUE", spelling, title, "=", r[0]["value"][1], json.dumps(r[0]["metric"], separators=(",", ":")))
    print("PANEL", spelling, rows, title)
PY
}
prom; check colon || echo "ERROR colon check failed"
spec underscore   # the agent restarts the server with its metrics spelled sglang_
prom; check underscore || echo "ERROR underscore check failed"
echo "AGENT-SD $(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9464/sd/servers").read().decode())')"
# Stopped: the manifest removed; the agent stops and removes the unit; both jobs drop it.
rm $M/live/server.yaml; t0=$(date +%s)
python3 - <<'PY'
import json, time, urllib.request
t0, gone = time.time(), {}
while time.time() - t0 < 120 and len(gone) < 2:
    t = json.loads(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets?state=active").read())["data"]["activeTargets"]
    for job in ("sglang", "sglang-file"):
        if job not in gone and not [x for x in t if x["labels"]["job"] == job]:
            gone[job] = time.time() - t0
    time.sleep(0.5)
for job in ("sglang", "sglang-file"):
    print("GONE", "%.1f" % gone[job] if job in gone else "never", job)
PY
echo "UNIT $(systemctl is-active sglang-e2e.service) $(ls /etc/systemd/system/sglang-e2e.service 2>/dev/null || echo removed)"
pkill -x prometheus
systemctl stop gpuplane-e2e.service
exit 0
