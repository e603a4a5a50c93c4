#!/bin/sh
# Captures the RTM_NEWQDISC requests iproute2's tc sends for CAKE into
# *.strace files (see README.md). Needs root, strace and iproute2. Runs every
# tc inside a throwaway network namespace; a kernel without CAKE rejects each
# request after tc has sent it, which is fine: the request is what we want.
set -u
cd "$(dirname "$0")"
ns=caketest
ip netns add "$ns" || exit 1
trap 'ip netns del "$ns"' EXIT

capture() {
	name=$1
	shift
	ip netns exec "$ns" strace -o "$name.strace.tmp" -e trace=sendmsg -e write=all -s 4096 "$@" 2>/dev/null
	{
		echo "# $*"
		cat "$name.strace.tmp"
	} >"$name.strace"
	rm -f "$name.strace.tmp"
}

capture atm-overhead44 tc qdisc add dev lo root handle 1: cake bandwidth 20mbit overhead 44 atm
capture ptm-overhead-4-mpu64 tc qdisc add dev lo root handle 1: cake bandwidth 50mbit ptm overhead -4 mpu 64
capture rtt-diffserv4-dualdst-nat-wash-ingress tc qdisc add dev lo root handle 1: cake bandwidth 100mbit rtt 50ms diffserv4 dual-dsthost nat wash ingress
capture ackaggr-nosplitgso-memlimit-besteffort tc qdisc add dev lo root handle 1: cake bandwidth 10mbit ack-filter-aggressive no-split-gso memlimit 8mb besteffort
capture flowblind-noatm-precedence tc qdisc add dev lo root handle 1: cake bandwidth 30mbit flowblind noatm precedence
capture bandwidth-only tc qdisc add dev lo root handle 1: cake bandwidth 20mbit
capture off-switches tc qdisc add dev lo root handle 1: cake bandwidth 20mbit diffserv3 dsthost nonat nowash egress no-ack-filter split-gso
capture diffserv8-triple-ackfilter tc qdisc add dev lo root handle 1: cake bandwidth 1gbit diffserv8 triple-isolate ack-filter
capture srchost tc qdisc add dev lo root handle 1: cake bandwidth 20mbit srchost
capture hosts tc qdisc add dev lo root handle 1: cake bandwidth 20mbit hosts
capture flows tc qdisc add dev lo root handle 1: cake bandwidth 20mbit flows
capture dual-srchost tc qdisc add dev lo root handle 1: cake bandwidth 20mbit dual-srchost
capture change-bandwidth tc qdisc change dev lo root cake bandwidth 15mbit
