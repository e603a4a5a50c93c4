#!/bin/sh
# check.sh keeps the packaging honest: the OpenWrt example configuration
# (UCI) parses, and so does the reference TOML, the binary reports its version, the systemd unit
# keeps its hardening, the procd init script parses and does what it says
# with procd stubbed out, the feed Makefile installs files that exist, builds
# the router binary alone, names its licence and hashes what it downloads.
# Needs Go; uses systemd-analyze when there is one; as root with ip(8) and
# setpriv(1) it also runs the daemon with exactly the unit's capabilities, as
# nobody, in throwaway network namespaces.
#
#   packaging/check.sh          (from anywhere)
#
# Exit status 0 when every check that could run passed; skipped checks say
# why.

set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
UNIT=packaging/systemd/autoshape.service
INIT=packaging/openwrt/autoshape.init
TOML=config/reference.toml
UCI=packaging/openwrt/autoshape.uci
FEED=packaging/openwrt/Makefile

TMP=$(mktemp -d)
NS=
cleanup() {
	if [ -n "$NS" ]; then
		ip netns del "${NS}a" 2>/dev/null || true
		ip netns del "${NS}b" 2>/dev/null || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

failed=0
ok() { printf 'ok    %s\n' "$1"; }
fail() { printf 'FAIL  %s\n' "$1"; failed=1; }
skip() { printf 'skip  %s\n' "$1"; }

# One build serves every check below: `config check` with it is what
# `go run ./cmd/autoshape config check` would do, without building twice.
# -buildvcs=auto, Go's default, in case GOFLAGS turns it off.
go build -buildvcs=auto -o "$TMP/autoshape" ./cmd/autoshape
BIN=$TMP/autoshape

# (a) The OpenWrt example (UCI) and the reference (TOML, what `config
# default` prints) pass the daemon's own check.
if out=$("$BIN" config check "$TOML" 2>&1); then
	ok "config check $TOML"
else
	fail "config check $TOML: $out"
fi
if out=$("$BIN" config check "$UCI" 2>&1); then
	ok "config check $UCI"
else
	fail "config check $UCI: $out"
fi

# The version: a build from a checkout names its commit, -X main.version
# stamps a release.
got=$("$BIN" version)
if ! git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
	skip "version of a build from a checkout: not a git checkout"
elif [ ! -d "$ROOT/.git" ]; then
	# go build finds a repository only by a .git directory.
	skip "version of a build from a checkout: a git worktree (.git is a file), which Go does not stamp"
elif commit=$(git -C "$ROOT" rev-parse --short=12 HEAD) &&
	printf '%s\n' "$got" | grep -q -- "-$commit"; then
	# Go's pseudo-version (v0.0.0-DATE-COMMIT), or dev-COMMIT.
	ok "version from the build info: $got"
else
	fail "version of a build from a checkout: \"$got\", want the commit $commit in it"
fi
go build -ldflags '-X main.version=9.8.7-r6' -o "$TMP/autoshape-stamped" ./cmd/autoshape
if [ "$("$TMP/autoshape-stamped" version)" = "autoshape 9.8.7-r6" ]; then
	ok "version stamped with -X main.version"
else
	fail "version stamped with -X main.version: $("$TMP/autoshape-stamped" version)"
fi

# (b) The unit keeps its privileges down and its commands right.
for line in \
	'DynamicUser=yes' \
	'CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW' \
	'AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW' \
	'NoNewPrivileges=yes' \
	'ProtectSystem=strict' \
	'ProtectHome=yes' \
	'PrivateTmp=yes' \
	'StateDirectory=autoshape' \
	'ConfigurationDirectory=autoshape' \
	'RestrictAddressFamilies=AF_NETLINK AF_INET AF_INET6 AF_UNIX' \
	'ExecStartPre=/usr/bin/autoshape config check /etc/autoshape/autoshape.toml' \
	'ExecStart=/usr/bin/autoshape run -c /etc/autoshape/autoshape.toml' \
	'ExecReload=/bin/kill -HUP $MAINPID' \
	'Restart=on-failure' \
	'KillSignal=SIGTERM'; do
	if grep -qxF "$line" "$UNIT"; then ok "unit: $line"; else fail "unit lacks: $line"; fi
done
for key in RestartSec StartLimitIntervalSec StartLimitBurst TimeoutStopSec; do
	if grep -q "^$key=" "$UNIT"; then ok "unit: $key="; else fail "unit lacks $key="; fi
done
# Nothing may widen what the lines above grant.
for key in CapabilityBoundingSet AmbientCapabilities RestrictAddressFamilies; do
	n=$(grep -c "^$key=" "$UNIT" || true)
	[ "$n" -eq 1 ] || fail "unit sets $key= $n times: the line checked above must be the only one"
done
for key in User Group SupplementaryGroups ReadWritePaths PrivateNetwork; do
	! grep -q "^$key=" "$UNIT" || fail "unit sets $key=: review what it grants, then this check"
done

# (c) The init script parses, and with procd stubbed out starts, reloads
# and triggers as documented, and refuses a broken configuration.
if sh -n "$INIT"; then ok "sh -n $INIT"; else fail "sh -n $INIT"; fi
for line in 'USE_PROCD=1' 'PROG=/usr/bin/autoshape' 'CONF=/etc/config/autoshape'; do
	if grep -qxF "$line" "$INIT"; then ok "init: $line"; else fail "init lacks: $line"; fi
done
procd() {
	# $1: what to run after sourcing the init script; $2: the config.
	sh -c '
		procd_open_instance() { echo "open"; }
		procd_set_param() { echo "param $*"; }
		procd_close_instance() { echo "close"; }
		procd_send_signal() { echo "signal $*"; }
		procd_open_trigger() { :; }
		procd_close_trigger() { :; }
		procd_add_config_trigger() { echo "trigger $*"; }
		procd_add_interface_trigger() { echo "trigger $*"; }
		procd_add_reload_trigger() { echo "reload trigger $*"; }
		logger() { :; }
		. "$1"
		PROG=$2 CONF=$3
		$4
	' sh "./$INIT" "$BIN" "$2" "$1" 2>&1
}
want() {
	# $1: name; $2: output; $3...: lines it must hold.
	name=$1 got=$2
	shift 2
	for line; do
		if ! printf '%s\n' "$got" | grep -qxF "$line"; then
			fail "init $name: no line \"$line\" in:
$got"
			return
		fi
	done
	ok "init $name"
}
got=$(procd start_service "$UCI") || true
want start_service "$got" open "param command $BIN run -c $UCI" \
	'param respawn 3600 15 5' 'param stdout 1' 'param stderr 1' "param file $UCI" close
got=$(procd reload_service "$UCI") || true
want reload_service "$got" 'signal autoshape * HUP'
got=$(procd service_triggers "$UCI") || true
want service_triggers "$got" 'reload trigger autoshape' 'trigger config.change sqm /etc/init.d/autoshape restart' \
	'trigger interface.*.up wan /etc/init.d/autoshape restart'
printf "config link 'wan'\n\toption interface 'wan'\n\toption bogus '1'\n" > "$TMP/broken.uci"
if got=$(procd start_service "$TMP/broken.uci"); then
	fail "init start_service accepted a broken configuration: $got"
elif printf '%s\n' "$got" | grep -q '^open$'; then
	fail "init start_service opened an instance for a broken configuration"
else
	ok "init start_service refuses a broken configuration"
fi

# The feed Makefile: installs files that exist, builds the router binary
# alone, says what it is and under which licence, stamps the version, and its
# recipes are tab-indented (make's rule, easy to lose in an edit).
for f in autoshape.init autoshape.uci; do
	if grep -q "\./$f " "$FEED" && [ -f "packaging/openwrt/$f" ]; then
		ok "feed Makefile installs $f"
	else
		fail "feed Makefile: ./$f is not installed or missing"
	fi
done
field() { sed -n "s/^$1:=//p" "$FEED"; }
for key in PKG_NAME PKG_VERSION PKG_RELEASE PKG_MAINTAINER; do
	if [ -n "$(field $key)" ]; then ok "feed Makefile: $key $(field $key)"; else fail "feed Makefile: no $key"; fi
done
if [ "$(field PKG_LICENSE)" = Apache-2.0 ]; then
	ok "feed Makefile: PKG_LICENSE Apache-2.0"
else
	fail "feed Makefile: PKG_LICENSE \"$(field PKG_LICENSE)\", want Apache-2.0"
fi
files=$(field PKG_LICENSE_FILES)
[ -n "$files" ] || fail "feed Makefile: no PKG_LICENSE_FILES"
for f in $files; do
	if [ -f "$f" ] && grep -q 'Apache License' "$f" && grep -q 'Version 2.0, January 2004' "$f"; then
		ok "feed Makefile: PKG_LICENSE_FILES $f is the Apache License 2.0"
	else
		fail "feed Makefile: PKG_LICENSE_FILES names $f, which is missing or not the Apache License 2.0"
	fi
done
pkg=$(field GO_PKG_BUILD_PKG)
if [ "$pkg" = github.com/autoshape/autoshape/cmd/autoshape ] &&
	[ "$(go list "$pkg" 2>/dev/null)" = "$pkg" ]; then
	ok "feed Makefile: GO_PKG_BUILD_PKG is the router binary alone"
else
	fail "feed Makefile: GO_PKG_BUILD_PKG \"$pkg\", want github.com/autoshape/autoshape/cmd/autoshape alone"
fi
case $(field GO_PKG_LDFLAGS_X) in
main.version=*) ok "feed Makefile: GO_PKG_LDFLAGS_X stamps main.version" ;;
*) fail "feed Makefile: GO_PKG_LDFLAGS_X does not stamp main.version" ;;
esac
# A downloaded source is checked against its hash; "skip" checks nothing.
# The local source tree (./src) has nothing to hash.
hash=$(field PKG_MIRROR_HASH)
if [ "$hash" = skip ]; then
	fail "feed Makefile: PKG_MIRROR_HASH:=skip (run make package/autoshape/check FIXUP=1)"
elif [ -n "$(field PKG_SOURCE_URL)" ] && ! printf '%s\n' "$hash" | grep -Eqx '[0-9a-f]{64}'; then
	fail "feed Makefile: PKG_SOURCE_URL without a PKG_MIRROR_HASH (run make package/autoshape/check FIXUP=1)"
else
	ok "feed Makefile: no unchecked download"
fi
if awk '/^define Package\/autoshape\/install/,/^endef/' "$FEED" |
	sed '1d;$d' | grep -v "$(printf '^\t')" | grep -q .; then
	fail "feed Makefile: an install recipe line does not start with a tab"
else
	ok "feed Makefile: install recipe indented with tabs"
fi
if make -s -n -C packaging binaries VERSION=check >/dev/null; then
	ok "make -n -C packaging binaries"
else
	fail "make -n -C packaging binaries"
fi

# (d) systemd's own reading of the unit, with ExecStart pointing at the
# binary just built (verify insists that it exists).
if command -v systemd-analyze >/dev/null 2>&1; then
	mkdir "$TMP/unit"
	sed "s#/usr/bin/autoshape#$BIN#g" "$UNIT" > "$TMP/unit/autoshape.service"
	if out=$(systemd-analyze verify --man=no "$TMP/unit/autoshape.service" 2>&1) &&
		[ -z "$out" ]; then
		ok "systemd-analyze verify"
	else
		fail "systemd-analyze verify: $out"
	fi
	# The exposure score is informative; verify --offline needs systemd 250.
	score=$(systemd-analyze security --offline=yes "$TMP/unit/autoshape.service" 2>/dev/null |
		sed -n 's/.*Overall exposure level for autoshape.service: //p') || true
	[ -n "$score" ] && printf 'info  systemd-analyze security: %s\n' "$score"
else
	skip "systemd-analyze verify: no systemd-analyze here"
fi

# (e) As root: the daemon as nobody with only the unit's capabilities
# (ambient, bounding set, no_new_privs) sets up HTB shaping on a veth, gets
# probe answers from the peer namespace, reloads on SIGHUP and on SIGTERM
# removes what it made and exits 0.
caps=$(sed -n 's/^AmbientCapabilities=//p' "$UNIT" | tr 'A-Z' 'a-z' |
	sed 's/cap_//g; s/^/+/; s/ \{1,\}/,+/g')
if [ "$(id -u)" != 0 ]; then
	skip "daemon with the unit's capabilities: not root"
elif ! command -v ip >/dev/null 2>&1 || ! command -v setpriv >/dev/null 2>&1; then
	skip "daemon with the unit's capabilities: needs ip and setpriv"
else
	NS=ascheck$$
	ip netns add "${NS}a"
	ip netns add "${NS}b"
	ip link add veth0 netns "${NS}a" type veth peer name veth1 netns "${NS}b"
	ip -n "${NS}a" addr add 192.0.2.1/24 dev veth0
	ip -n "${NS}b" addr add 192.0.2.2/24 dev veth1
	for n in a b; do
		ip -n "$NS$n" link set lo up
		ip -n "$NS$n" link set "veth$([ $n = a ] && echo 0 || echo 1)" up
	done
	chmod 755 "$TMP"
	mkdir "$TMP/state"
	chown nobody "$TMP/state"
	cat > "$TMP/run.toml" <<EOF
state_file = "$TMP/state/state.json"
on_exit = "remove"
[metrics]
listen = ""
[[link]]
interface = "veth0"
backend = "htb"
[link.download]
min = "5mbit"
base = "40mbit"
max = "80mbit"
[link.upload]
min = "2mbit"
base = "10mbit"
max = "20mbit"
[link.probe]
reflectors = ["192.0.2.2"]
active = 1
EOF
	ip netns exec "${NS}a" setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups \
		--inh-caps="-all,$caps" --ambient-caps="-all,$caps" \
		--bounding-set="-all,$caps" --no-new-privs \
		"$BIN" run -c "$TMP/run.toml" > "$TMP/run.log" 2>&1 &
	pid=$!
	sleep 4
	qd=$(ip netns exec "${NS}a" tc qdisc show)
	kill -HUP "$pid"
	sleep 1
	kill -TERM "$pid"
	rc=0
	wait "$pid" || rc=$?
	after=$(ip netns exec "${NS}a" tc qdisc show | grep -v noqueue || true)
	log=$(cat "$TMP/run.log")
	if [ "$rc" -ne 0 ]; then
		fail "daemon with $caps: exit status $rc: $log"
	elif ! printf '%s\n' "$qd" | grep -q 'htb a5: dev veth0 root' ||
		! printf '%s\n' "$qd" | grep -q 'htb a5: dev ifb4veth0 root'; then
		fail "daemon with $caps: no HTB on veth0 and ifb4veth0: $qd $log"
	elif printf '%s\n' "$log" | grep -q -e '"level":"error"' -e 'cannot probe'; then
		fail "daemon with $caps: errors in its log: $log"
	elif ! printf '%s\n' "$log" | grep -q '"msg":"reloading"'; then
		fail "daemon with $caps: no reload on SIGHUP: $log"
	elif [ -n "$after" ]; then
		fail "daemon with $caps: shaping left after exit: $after"
	elif ! grep -q '"reflectors"' "$TMP/state/state.json" 2>/dev/null; then
		fail "daemon with $caps: no state file with its reflectors"
	else
		ok "daemon as nobody with only $caps: shaping, probes, reload, clean exit"
	fi
fi

if [ "$failed" -ne 0 ]; then
	echo "packaging checks FAILED"
	exit 1
fi
echo "packaging checks passed"
