# shellcheck shell=bash
# Checkpoint scenario quota_no_cuda: The same under a GPU-memory quota, never touching CUDA (no GPU
# state to restore).
# The harness, ../ckpt_test.sh, runs it and defines the steps and the checks it shares.

source "$HERE/scenarios/python_file.sh"

# Under a GPU-memory quota on the emulated driver, but never touching CUDA: the image holds no
# GPU state, and the restore must not wait for a process to answer the driver for one.
scenario_quota_no_cuda() {
  python_file_scenario quota_no_cuda --gpu-mem 512MiB --emulated-gpus 1x4GiB
}
