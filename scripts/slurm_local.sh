#!/usr/bin/env bash
# A throwaway one-node Slurm (munged + slurmctld + slurmd) under one folder, for the launcher tests.
#
#   bash scripts/slurm_local.sh start DIR   # writes DIR/slurm.conf, starts the daemons, waits until a node is idle
#   export SLURM_CONF=DIR/slurm.conf        # sbatch / squeue / scancel (and submitit) then talk to it
#   bash scripts/slurm_local.sh stop DIR    # cancels its jobs, stops the three daemons by their pid files
#
# Everything (munge key and socket, state, spool, logs, pid files) lives in DIR, so nothing in /etc or /run
# is touched and the daemons of one test run cannot meet another's. Needs root (SlurmUser=root) and Debian's
# slurm-wlm + munge (scripts/setup_slurm.sh installs them). Exit 3 with one line when it cannot start.
# ProctrackType=proctrack/linuxproc and TaskPlugin=task/none: no cgroups, which containers rarely have.
set -euo pipefail
cmd=${1:-}
DIR=${2:-}
if [ -z "$cmd" ] || [ -z "$DIR" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
CONF="$DIR/slurm.conf"

pid_of() { [ -f "$DIR/$1.pid" ] && cat "$DIR/$1.pid" || true; }

stop_pid() {  # stop_pid NAME: SIGTERM the daemon named in DIR/NAME.pid, wait up to 10 s, then SIGKILL
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || { rm -f "$DIR/$1.pid"; return 0; }
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$DIR/$1.pid"; return 0; }
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$DIR/$1.pid"
}

case "$cmd" in
start)
  if [ "$(id -u)" != 0 ]; then echo "slurm_local: needs root (SlurmUser=root)" >&2; exit 3; fi
  for bin in munged slurmctld slurmd sbatch; do
    command -v "$bin" >/dev/null || { echo "slurm_local: $bin not found (apt-get install slurm-wlm munge)" >&2; exit 3; }
  done
  mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool"
  chmod 700 "$DIR/munge"
  # Free TCP ports for slurmctld and slurmd (two test runs on one machine must not collide).
  read -r CTLD_PORT SLURMD_PORT < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$DIR/munge/munge.key"
  munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munge/munged.seed"
  CPUS=$(nproc)
  cat > "$CONF" <<EOF
ClusterName=hadwtest
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job (default 120 s): a preempted run restarts after 10 s here.
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
# Look at pending jobs every second (default 60 s / 30 s): a requeued run starts as soon as it may.
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
KillWait=5
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=localnode NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$CONF"
  slurmctld -f "$CONF" -c
  slurmd -f "$CONF" -N localnode
  for _ in $(seq 150); do  # up to 30 s for the node to register
    state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
    if [ "$state" = idle ]; then
      echo "slurm_local: up (SLURM_CONF=$CONF)"
      exit 0
    fi
    sleep 0.2
  done
  echo "slurm_local: the node did not come up (state '${state:-none}'); see $DIR/slurmctld.log and $DIR/slurmd.log" >&2
  exit 3
  ;;
stop)
  export SLURM_CONF="$CONF"
  if [ -n "$(pid_of slurmctld)" ] && kill -0 "$(pid_of slurmctld)" 2>/dev/null; then
    # Cancel every job first: with proctrack/linuxproc a job's slurmstepd outlives a stopped slurmd.
    scancel --full --quiet --user=root 2>/dev/null || true
    for _ in $(seq 150); do
      [ -z "$(squeue -h -o %i -t PD,R,CG,S,CF,RQ 2>/dev/null | head -1)" ] && break
      sleep 0.2
    done
  fi
  stop_pid slurmd
  stop_pid slurmctld
  stop_pid munged
  echo "slurm_local: stopped"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac
