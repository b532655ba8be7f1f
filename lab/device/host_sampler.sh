#!/usr/bin/env bash
# The host's CPU state once a second, into FILE (tab-separated: time, /proc/stat's aggregate cpu ticks user nice
# system idle iowait irq softirq steal, the cgroup's cpu.stat usage_usec nr_throttled throttled_usec, the 1-minute
# load, the mean MHz /proc/cpuinfo shows), until STOPFILE exists; first a line of the host's facts (cores, the cgroup's
# cpu.max, the CPU model). For matching compile seconds to what the host did meanwhile (clock_plugin.py's times).
#   bash lab/device/host_sampler.sh FILE STOPFILE
file=${1:?FILE}; stop=${2:?STOPFILE}
cg=/sys/fs/cgroup
quota=$(cat $cg/cpu.max $cg/cpu/cpu.cfs_quota_us 2>/dev/null | head -1)
{ printf '# nproc %s cpu_count %s cpu.max %s model %s\n' "$(nproc)" "$(python3 -c 'import os; print(os.cpu_count())')" \
    "${quota:-none}" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  printf 'time\tuser\tnice\tsystem\tidle\tiowait\tirq\tsoftirq\tsteal\tcg_usage_usec\tcg_nr_throttled\tcg_throttled_usec\tload1\tmhz\n'
} > "$file"
while [[ ! -e $stop ]]; do
  read -r _ u n s i w q sq st _ < /proc/stat
  # cgroup v2's cpu.stat, or v1's (throttled_time in ns, usage in cpuacct.usage)
  cgs=$(awk '$1=="usage_usec"{u=$2} $1=="nr_throttled"{n=$2} $1=="throttled_usec"{t=$2} $1=="throttled_time"{t=int($2/1000)}
             FILENAME~/cpuacct.usage$/{u=int($1/1000)} END{printf "%.0f\t%s\t%.0f", u, n, t}' \
        $(ls $cg/cpu.stat $cg/cpu/cpu.stat $cg/cpu,cpuacct/cpu.stat $cg/cpuacct/cpuacct.usage 2>/dev/null) < /dev/null)
  mhz=$(awk -F: '/cpu MHz/{s+=$2; c++} END{if (c) printf "%.0f", s/c}' /proc/cpuinfo)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date +%s.%N | cut -c1-14)" "$u" "$n" "$s" "$i" "$w" "$q" "$sq" "$st" \
    "${cgs:-		}" "$(cut -d' ' -f1 /proc/loadavg)" "${mhz:-}" >> "$file"
  sleep 1
done
