#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for tests and for trying train.sbatch locally.
#   scripts/slurm/local_cluster.sh start <state dir>   # munged + slurmctld + slurmd, node idle
#   scripts/slurm/local_cluster.sh stop  <state dir>   # stops exactly the daemons it started
# Needs root and Debian's slurm-wlm + munge (apt-get install slurm-wlm munge). No cgroups, no
# accounting: proctrack/linuxproc + task/none (cgroup plugins fail in containers). Exports nothing;
# use SLURM_CONF=<state dir>/slurm.conf with sbatch/squeue/scontrol.
set -euo pipefail
cmd=${1:?start|stop}
dir=$(realpath -m "${2:?state dir}")
# munged runs as user munge, which may not traverse <state dir> (pytest's tmp is 0700 root):
# its socket, pid and log live under /run/munge instead, one dir per cluster.
mdir=/run/munge/trainwell-$(printf %s "$dir" | md5sum | cut -c1-10)

stop_pid() {  # by pid file only: never by name (other clusters/daemons may be running)
  local file=$1
  [ -f "$file" ] || return 0
  local pid; pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

if [ "$cmd" = stop ]; then
  stop_pid "$dir/slurmd.pid"
  stop_pid "$dir/slurmctld.pid"
  stop_pid "$mdir/munged.pid"
  rm -rf "$mdir"
  exit 0
fi

[ "$cmd" = start ] || { echo "usage: $0 start|stop <state dir>" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "local_cluster.sh needs root (slurmd runs jobs as their users)" >&2; exit 2; }
mkdir -p "$dir"/{spool,state,log}
host=$(hostname)
node=$(slurmd -C | head -1)  # NodeName=<host> CPUs=... must match the hardware exactly

mkdir -p /run/munge "$mdir" && chown munge:munge /run/munge "$mdir"
runuser -u munge -- munged --socket="$mdir/munge.socket" --pid-file="$mdir/munged.pid" \
  --log-file="$mdir/munged.log" --seed-file="$mdir/munged.seed"

cat > "$dir/slurm.conf" <<CONF
ClusterName=trainwell-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$mdir/munge.socket,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SchedulerParameters=sched_interval=5,bf_interval=5
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=$((6817 + RANDOM % 1000))
SlurmdPort=$((7817 + RANDOM % 1000))
$node State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i
slurmd
for _ in $(seq 100); do
  state=$(sinfo -h -o %T 2>/dev/null || true)
  [ "$state" = idle ] && exit 0
  sleep 0.2
done
echo "slurm node did not become idle (state: ${state:-none}); see $dir/log" >&2
exit 1
