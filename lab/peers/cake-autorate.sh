#!/usr/bin/env bash
# cake-autorate.sh -- cake-autorate (fetched by the user, GPL, never in this repository),
# unmodified, as a linklab `exec:` scheme on real CAKE:
#   linklab run --kernel uml --scenario step \
#       --scheme "exec:/abs/path/lab/peers/cake-autorate.sh /abs/path/cake-autorate"
# Inside the User-mode Linux kernel the lab's router shaper is CAKE (set up by autoshape's
# actuator at the base rates on $LINKLAB_UP_IFACE and on the IFB $LINKLAB_DOWN_IFACE), so
# cake-autorate's own `tc qdisc change root dev X cake bandwidth N` calls go straight to the
# kernel. Runs in the lab's rtr namespace with LINKLAB_* in its environment; writes a
# cake-autorate config from it and runs cake-autorate.sh with it.
#
# Optional environment:
#   CA_LOG_DIR      where cake-autorate's log and this script's own output go (default
#                   $LINKLAB_DIR/ca-log, kept with the run's files under LINKLAB_KEEP=1)
#   PINGER_METHOD   cake-autorate's pinger_method (default fping if installed, else ping)
#   CA_ACTIVE_THR   connection_active_thr_kbps (default 500)
#   CA_STATS=1      also log cake-autorate's per-sample DATA lines (processing stats)
#   CA_DEBUG=1      also log cake-autorate's DEBUG lines (its own default; 0 here: they slow it
#                   down where the kernel has little CPU to spare)
set -eu
CA=${1:?usage: $0 CAKE_AUTORATE_DIR}
D=${LINKLAB_DIR:?not run by linklab}
LOG=${CA_LOG_DIR:-$D/ca-log}
mkdir -p "$LOG"
[ -n "${CA_LOG_DIR:-}" ] && exec >>"$LOG/wrapper.log" 2>&1

# cake-autorate uses bash process substitution (<(:)), which needs /dev/fd (lab/uml's init
# makes it; an older runner's guest had none).
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd

# Real CAKE or nothing: without it (the host lab's HTB) cake-autorate's tc calls would fail
# silently, as it sends their errors to /dev/null.
for dev in "$LINKLAB_DOWN_IFACE" "$LINKLAB_UP_IFACE"; do
	q=$(tc qdisc show dev "$dev")
	case $q in
	*"qdisc cake "*) echo "$EPOCHREALTIME start: $q" ;;
	*) echo "no CAKE root qdisc on $dev ($q): run the lab with --kernel uml" >&2; exit 1 ;;
	esac
done
if [ -z "${PINGER_METHOD:-}" ]; then
	PINGER_METHOD=ping
	command -v fping >/dev/null && PINGER_METHOD=fping
fi

cat > "$D/config.pb.sh" <<CFG
#!/usr/bin/env bash
dl_if=$LINKLAB_DOWN_IFACE
ul_if=$LINKLAB_UP_IFACE
pinger_method=$PINGER_METHOD
reflectors=($(printf '"%s" ' $LINKLAB_REFLECTORS))
no_pingers=6
adjust_dl_shaper_rate=1
adjust_ul_shaper_rate=1
min_dl_shaper_rate_kbps=$LINKLAB_DOWN_MIN_KBIT
base_dl_shaper_rate_kbps=$LINKLAB_DOWN_BASE_KBIT
max_dl_shaper_rate_kbps=$LINKLAB_DOWN_MAX_KBIT
min_ul_shaper_rate_kbps=$LINKLAB_UP_MIN_KBIT
base_ul_shaper_rate_kbps=$LINKLAB_UP_BASE_KBIT
max_ul_shaper_rate_kbps=$LINKLAB_UP_MAX_KBIT
connection_active_thr_kbps=${CA_ACTIVE_THR:-500}
output_processing_stats=${CA_STATS:-0}
output_load_stats=0
output_reflector_stats=0
output_summary_stats=0
output_cake_changes=1
debug=${CA_DEBUG:-0}
output_cpu_stats=0
output_cpu_raw_stats=0
log_file_path_override="$LOG"
CFG

export CAKE_AUTORATE_SCRIPT_PREFIX="$CA" CAKE_AUTORATE_CONFIG_PREFIX="$D"
unset INVOCATION_ID

# cake-autorate runs as a child so that this script sees linklab's SIGTERM (sent to the whole
# process group at the run's end, SIGKILL 5 s later) while cake-autorate, its pingers and its
# helpers still live, and logs the CPU time the group used: utime+stime+cutime+cstime of every
# process in it (a reaped tc counts in its parent's cutime). Builtins only: no exec.
group_cpu() {
	local f s ticks=0 n=0 pg
	read -r -a s </proc/self/stat
	pg=${s[4]}
	for f in /proc/[0-9]*/stat; do
		read -r -a s 2>/dev/null <"$f" || continue
		[ "${s[4]}" = "$pg" ] || continue
		ticks=$((ticks + s[13] + s[14] + s[15] + s[16])) n=$((n + 1))
	done
	echo "$EPOCHREALTIME after $(( (${EPOCHREALTIME/.} - ${t0/.}) / 1000 )) ms: $n processes in the group," \
		"CPU $((ticks * 10)) ms (user+system, with reaped children; USER_HZ 100)"
}
t0=$EPOCHREALTIME
bash "$CA/cake-autorate.sh" "$D/config.pb.sh" &
ca=$!
trap 'group_cpu' TERM INT
set +e
while :; do
	wait "$ca"; rc=$?
	# A trapped signal ends the wait early, with cake-autorate still running down.
	kill -0 "$ca" 2>/dev/null || break
done
echo "$EPOCHREALTIME cake-autorate exited: $rc"
exit "$rc"
