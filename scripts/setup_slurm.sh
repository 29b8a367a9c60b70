#!/usr/bin/env bash
# Debian's Slurm and munge for the Slurm launcher tests (tests/test_launchers.py starts a one-node cluster
# with scripts/slurm_local.sh). Installs only when missing and only as root with apt-get (~25 s); otherwise
# says why and exits 0: those tests then skip with the reason.
set -euo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
  && command -v munged >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup_slurm: slurm-wlm/munge missing and cannot be installed here (needs root and apt-get);" \
    "the Slurm launcher tests will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q slurm-wlm munge >/dev/null
