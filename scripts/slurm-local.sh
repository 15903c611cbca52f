#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for `fedcli sweep --executor slurm` and its tests.
#
#   scripts/slurm-local.sh up      install slurm-wlm + munge if missing (apt, as root), write the config, start
#                                  munged, slurmctld and slurmd, wait until `sinfo` shows the node idle
#   scripts/slurm-local.sh down    stop slurmd, slurmctld and munged (the config and packages stay)
#   scripts/slurm-local.sh status  sinfo and squeue
#
# Idempotent: `up` on a running cluster with the same config only checks it. Needs root (the daemons run as root,
# SlurmUser=root). The node has this machine's CPUs and memory, one partition `local` (the default); processes
# are tracked by parent pid (proctrack/linuxproc, no cgroups needed in a container); KillWait is Slurm's default,
# 30 s: a cancelled or timed-out job gets SIGTERM and, 30 s later, SIGKILL (a run that stops promptly ends the job at
# once; 5 s was too short for a loaded 2-core machine); finished jobs stay visible to `scontrol show job` for an hour
# (MinJobAge), since a cluster without slurmdbd has no `sacct`.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
LOG_DIR=/var/log/slurm
SPOOL=/var/spool/slurm-local
PARTITION=${SLURM_LOCAL_PARTITION:-local}

die() { echo "slurm-local: $*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "run me as root (it installs packages and starts the Slurm daemons)"; }

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && command -v sbatch >/dev/null; then
    return
  fi
  echo "slurm-local: installing slurm-wlm and munge (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q slurm-wlm munge >/dev/null
}

write_config() {
  local host cpus mem tmp
  host=$(hostname -s)
  cpus=$(nproc --all)
  mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)  # MB; 10% left for the system
  mkdir -p "$CONF_DIR" "$LOG_DIR" "$SPOOL/ctld" "$SPOOL/d"
  tmp=$(mktemp)
  cat >"$tmp" <<EOF
# written by fedcli's scripts/slurm-local.sh: a one-node cluster for tests
ClusterName=fedcli-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=30
OverTimeLimit=0
MinJobAge=3600
InactiveLimit=0
SlurmdTimeout=60
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  if ! cmp -s "$tmp" "$CONF" 2>/dev/null; then
    mv "$tmp" "$CONF"
    chmod 644 "$CONF"
    echo "slurm-local: wrote $CONF ($host: $cpus CPUs, $mem MB)"
    CHANGED=1
  else
    rm -f "$tmp"
  fi
}

running() { pgrep -x "$1" >/dev/null; }

stop_daemon() {  # by the pid file the daemon wrote (never by name)
  local pidfile=$1 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$pidfile"
}

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    if id munge >/dev/null 2>&1; then
      runuser -u munge -- /usr/sbin/munged --force
    else
      /usr/sbin/munged --force
    fi
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  munge -n | unmunge >/dev/null || die "munged does not answer (see /var/log/munge/munged.log)"
}

wait_idle() {
  local host state
  host=$(hostname -s)
  for _ in $(seq 120); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -1 || true)
    case "$state" in
      idle|mixed|allocated) echo "slurm-local: up: node $host $state, partition $PARTITION"; return 0 ;;
      down*|drain*|fail*) scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  sinfo -N -l || true
  die "the node did not become idle within 60 s (see $LOG_DIR/slurmctld.log and slurmd.log)"
}

up() {
  need_root
  install_packages
  CHANGED=0
  write_config
  start_munge
  if [ "$CHANGED" = 1 ]; then  # a new config: restart both daemons with it
    stop_daemon /run/slurmd.pid
    stop_daemon /run/slurmctld.pid
  fi
  running slurmctld || /usr/sbin/slurmctld
  running slurmd || /usr/sbin/slurmd
  wait_idle
}

down() {
  need_root
  stop_daemon /run/slurmd.pid
  stop_daemon /run/slurmctld.pid
  if [ -f /run/munge/munged.pid ]; then stop_daemon /run/munge/munged.pid; fi
  echo "slurm-local: down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) sinfo; squeue ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
