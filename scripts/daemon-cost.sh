#!/usr/bin/env bash
# Measures what the daemon costs on this machine: its CPU time per minute and
# its memory (VmHWM, the peak, and VmRSS at the end), and the log it writes at
# level info (lines per minute, typical and longest line). It runs the real
# router binary in two network namespaces it creates (router and
# reflectors, joined by one veth per link, with the HTB backend), with the
# default probing (six reflectors per link, 40 probes a second, method
# auto); packets stay inside the namespaces.
#
#   idle     one link, no traffic: the link goes idle after 10 s and the
#            window starts after that;
#   loaded   one link, ~40 Mbit/s of UDP each way, the download through a
#            30 Mbit/s bottleneck with a 500 kB buffer (a bloated modem):
#            the controller cuts and probes as on a busy line;
#   links16  16 links in one process, each loaded with ~3 Mbit/s each way
#            (enough to keep it active), reported per link too.
#
# Each case prints one JSON line. Needs root, iproute2 and python3 (the
# load). AUTOSHAPE=path uses that binary instead of building one;
# SECONDS_MEASURED (default 60) is the window.
# Usage: scripts/daemon-cost.sh [idle|loaded|links16]...   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."
window=${SECONDS_MEASURED:-60}
tmp=$(mktemp -d)
r=as-cost-r-$$ x=as-cost-x-$$
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	ip netns del "$r" 2>/dev/null || true
	ip netns del "$x" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
bin=${AUTOSHAPE:-}
if [ -z "$bin" ]; then
	bin=$tmp/autoshape
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$bin" ./cmd/autoshape
fi
hz=$(getconf CLK_TCK)

# cpu_ticks PID: user + system time of every thread, live or ended.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# net N: link N is wanN (10.80.N.1) in the router namespace, its reflectors
# 10.80.N.2-7 on rfN in the other.
net() {
	local n=$1
	ip -n "$r" link add "wan$n" type veth peer name "rf$n" netns "$x"
	ip -n "$r" addr add "10.80.$n.1/24" dev "wan$n"
	ip -n "$r" link set "wan$n" up
	for a in 2 3 4 5 6 7; do ip -n "$x" addr add "10.80.$n.$a/24" dev "rf$n"; done
	ip -n "$x" link set "rf$n" up
}

config() { # links
	cat <<EOT
state_file = "$tmp/state.json"
[log]
level = "info"
EOT
	for ((n = 0; n < $1; n++)); do
		cat <<EOT
[[link]]
name = "wan$n"
interface = "wan$n"
backend = "htb"
[link.download]
min = "1mbit"
base = "20mbit"
max = "50mbit"
[link.upload]
min = "1mbit"
base = "20mbit"
max = "50mbit"
[link.probe]
reflectors = ["10.80.$n.2", "10.80.$n.3", "10.80.$n.4", "10.80.$n.5", "10.80.$n.6", "10.80.$n.7"]
EOT
	done
}

# load NETNS SECONDS MBIT DEST...: UDP at about MBIT Mbit/s to each DEST.
load() {
	local ns=$1 secs=$2 mbit=$3
	shift 3
	ip netns exec "$ns" python3 -c "
import socket, sys, time
dests = sys.argv[1:]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
b = b'x' * 1400
per = max(1, round($mbit * 1e6 / 8 / 1400 / 100))  # packets per 10 ms
end = time.time() + $secs
while time.time() < end:
    for d in dests:
        for _ in range(per):
            try:
                s.sendto(b, (d, 9))
            except OSError:
                pass
    time.sleep(0.01)
" "$@" &
	pids+=($!)
}

measure() { # case links warmup mbit
	local name=$1 links=$2 warmup=$3 mbit=$4
	ip netns add "$r"
	ip netns add "$x"
	ip -n "$r" link set lo up
	ip -n "$x" link set lo up
	local down=() up=()
	for ((n = 0; n < links; n++)); do
		net "$n"
		down+=("10.80.$n.1")
		up+=("10.80.$n.2")
	done
	config "$links" >"$tmp/c.toml"
	if [ "$links" = 1 ] && [ "$mbit" != 0 ]; then
		tc -n "$x" qdisc add dev rf0 root handle 1: htb default 1
		tc -n "$x" class add dev rf0 parent 1: classid 1:1 htb rate 30mbit
		tc -n "$x" qdisc add dev rf0 parent 1:1 bfifo limit 500000
	fi
	if [ "$mbit" != 0 ]; then
		load "$x" $((warmup + window + 5)) "$mbit" "${down[@]}"
		load "$r" $((warmup + window + 5)) "$mbit" "${up[@]}"
	fi
	ip netns exec "$r" "$bin" run -c "$tmp/c.toml" >"$tmp/log" 2>&1 &
	local pid=$!
	pids+=("$pid")
	sleep "$warmup"
	local t0 l0
	t0=$(cpu_ticks "$pid")
	l0=$(wc -l <"$tmp/log")
	sleep "$window"
	local t1 l1 hwm rss
	t1=$(cpu_ticks "$pid")
	l1=$(wc -l <"$tmp/log")
	hwm=$(status_kib "$pid" VmHWM)
	rss=$(status_kib "$pid" VmRSS)
	sed -n "$((l0 + 1)),${l1}p" "$tmp/log" >"$tmp/window.log"
	kill -TERM "$pid"
	wait "$pid" || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=()
	ip netns del "$r"
	ip netns del "$x"
	local n p50 max allmax
	n=$(wc -l <"$tmp/window.log")
	p50=$(awk '{ print length($0) }' "$tmp/window.log" | sort -n | awk -v n="$n" 'NR == int((n + 1) / 2) { print; exit } END { if (!n) print 0 }')
	max=$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' "$tmp/window.log")
	allmax=$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' "$tmp/log")
	awk -v name="$name" -v links="$links" -v ticks=$((t1 - t0)) -v hz="$hz" -v secs="$window" \
		-v hwm="$hwm" -v rss="$rss" -v n="$n" -v p50="$p50" -v max="$max" -v allmax="$allmax" 'BEGIN {
		cpu = ticks / hz * 60 / secs
		printf "{\"case\":\"%s\",\"links\":%d,\"seconds\":%d,\"cpu_s_per_min\":%.3f,\"cpu_s_per_min_per_link\":%.3f,\"vm_hwm_kib\":%d,\"vm_rss_kib\":%d,\"log_lines_per_min\":%.1f,\"log_line_bytes_p50\":%d,\"log_line_bytes_max\":%d,\"log_line_bytes_max_run\":%d}\n",
			name, links, secs, cpu, cpu / links, hwm, rss, n * 60 / secs, p50, max, allmax
	}'
	if [ -n "${KEEP_LOG:-}" ]; then cp "$tmp/log" "$KEEP_LOG.$name"; fi
}

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(idle loaded links16)
for c in "${cases[@]}"; do
	case $c in
	idle) measure idle 1 15 0 ;;
	loaded) measure loaded 1 10 40 ;;
	links16) measure links16 16 10 3 ;;
	*)
		echo "usage: $0 [idle|loaded|links16]..." >&2
		exit 2
		;;
	esac
done
