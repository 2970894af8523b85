# shellcheck shell=bash
# Checkpoint scenario gpu_quota: The same under a GPU-memory quota: the quota's counts move with the
# job.
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

source "$HERE/scenarios/gpu_remap.sh"

# The same under a GPU-memory quota: the interposer's counts travel with the job (cuMemGetInfo
# reports the same quota-relative free memory on the new GPU as before on the old one).
scenario_gpu_quota() { remap_scenario gpu_quota --gpu-mem 512MiB; }
