#!/usr/bin/env bash
# SLURM checkpoint and resume of a step whose workload's pid now belongs to another process, and
# restores of an image of another uid (slurm_stale_pid.py says how). A real `paladin server` and
# `paladin agent` (root, emulated GPU, CRIU); the steps run as nobody under a fake slurmstepd.
# Needs root, setpriv and CRIU (exits 77 without).
#
# usage: slurm_stale_pid_test.sh PALADIN
set -uo pipefail

PALADIN=$(readlink -f "${1:?usage: slurm_stale_pid_test.sh PALADIN}")
source "$(dirname "$0")/seclib.sh"
sec_need_agent_tools
[[ -x ${PALADIN_CRIU:-/opt/paladin/criu/criu} ]] || { echo "SKIP: no CRIU"; exit 77; }

sec_scratch stalepid
chmod 0755 "$TMP"
sec_copy_scripts slurm_stale_pid.py
sec_start_server "$TMP/server"
sec_start_agent

sec_run_py slurm_stale_pid.py main "$SOCK" "$TMP"
