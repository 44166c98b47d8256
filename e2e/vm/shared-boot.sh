#!/bin/bash
# Runs inside the VM (as /usr/local/bin/check.sh): several scenarios of e2e/vm/scenarios/ in one
# boot, in the order the job argument gpuplane.scenarios=a,b,c (run.sh VM_ARGS) names them, each installed as
# /usr/local/bin/<name>.sh. Before the first and after each one the host is reset (reset_host of
# scenario-lib.sh) and described (host_digest), so that a test can check that every scenario
# started from the host the image boots into. Prints, per scenario NAME:
#   @@SCENARIO@@ NAME          then everything the scenario printed
#   @@SCENARIO-END@@ NAME RC   its exit status
#   DIGEST NAME [...]          the host after the reset that follows it
# and first "DIGEST pristine [...]". Boot one scenario by hand with
#   VM_ARGS=gpuplane.scenarios=story e2e/vm/run.sh e2e/vm/shared-boot.sh <files...>
set -u
. /usr/local/bin/scenario-lib.sh
echo "DIGEST pristine $(host_digest)"
for s in $(job_arg gpuplane.scenarios | tr , ' '); do
  echo "@@SCENARIO@@ $s"
  bash "/usr/local/bin/$s.sh"
  echo "@@SCENARIO-END@@ $s $?"
  reset_host
  echo "DIGEST $s $(host_digest)"
done
