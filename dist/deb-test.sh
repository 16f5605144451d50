#!/usr/bin/env bash
# The Debian package, as a user gets it: built (dist/deb-build.sh), installed with
# `apt-get install ./selvedge_*.deb`, its configuration checked, a page served by the
# installed binary as the selvedge user, then purged, leaving nothing but what Debian
# policy keeps (the selvedge system user). Needs root and apt-get; run by ./scripts/test.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "deb-test: $*"; }
fail() { echo "deb-test: FAILED: $*" >&2; exit 1; }

dist/deb-build.sh --output target/debian/selvedge-test.deb >/dev/null
deb=target/debian/selvedge-test.deb
apt-get purge -y -qq selvedge >/dev/null 2>&1 || true
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "./$deb" >/dev/null
say "installed $(dpkg-query -W -f '${Package} ${Version}' selvedge)"

# What the package put in place.
for f in /usr/bin/selvedge /etc/selvedge/selvedge.toml /etc/logrotate.d/selvedge \
    /usr/share/man/man1/selvedge.1.gz /usr/share/bash-completion/completions/selvedge \
    /usr/share/zsh/vendor-completions/_selvedge /usr/share/doc/selvedge/config.md; do
    [[ -e $f ]] || fail "$f is missing"
done
unit=$(dpkg -L selvedge | grep -E '/systemd/system/selvedge\.service$' || true)
[[ -n $unit && -e $unit ]] || fail "the systemd unit is missing"
grep -q '^StateDirectory=selvedge' "$unit" || fail "the unit has no StateDirectory"
grep -q '^ExecStart=/usr/bin/selvedge run -c /etc/selvedge/selvedge.toml' "$unit" || fail "the unit's ExecStart"
getent passwd selvedge >/dev/null || fail "no selvedge user"
[[ $(stat -c %U /var/log/selvedge) == selvedge ]] || fail "/var/log/selvedge is not the selvedge user's"
grep -q '^/etc/selvedge/selvedge.toml$' /var/lib/dpkg/info/selvedge.conffiles || fail "the configuration is not a conffile"
selvedge check -c /etc/selvedge/selvedge.toml || fail "selvedge check on the installed configuration"
say "the installed configuration checks"

# The installed binary serves a page as the selvedge user (on a test port: 80 may be taken,
# and there is no systemd here to start the unit).
tmp=$(mktemp -d)
trap 'if [[ -n ${pid:-} ]]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$tmp"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The installed configuration, its listeners moved to the test port.
python3 - /etc/selvedge/selvedge.toml "$tmp/selvedge.toml" "$port" <<'PY'
import sys
src, dst, port = sys.argv[1:]
text = open(src).read()
text = text.replace('[[listen]]\naddress = "[::]:80"\n\n', "")
text = text.replace('address = "0.0.0.0:80"', f'address = "127.0.0.1:{port}"')
assert f"127.0.0.1:{port}" in text and "[::]:80" not in text, text
open(dst, "w").write(text)
PY
selvedge run -c "$tmp/selvedge.toml" 2>"$tmp/err" &
pid=$!
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
body=$(curl -sS --max-time 5 "http://127.0.0.1:$port/") || fail "no answer: $(cat "$tmp/err")"
if [[ -e /var/www/html/index.selvedge.html ]]; then
    [[ $body == *"selvedge is serving"* ]] || fail "not the default page: $body"
fi
grep -q "running as selvedge:selvedge" "$tmp/err" || fail "not running as the selvedge user: $(cat "$tmp/err")"
# The access log is written by a flusher once a second.
for _ in $(seq 30); do grep -q '"GET / HTTP/1.1" 200' /var/log/selvedge/access.log 2>/dev/null && break; sleep 0.1; done
grep -q '"GET / HTTP/1.1" 200' /var/log/selvedge/access.log ||
    fail "no access log line: $(cat /var/log/selvedge/access.log 2>&1)"
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=
say "served a page from /var/www/html as the selvedge user"

apt-get purge -y -qq selvedge >/dev/null
left=()
for f in /usr/bin/selvedge /etc/selvedge /etc/logrotate.d/selvedge /usr/share/man/man1/selvedge.1.gz \
    /usr/share/doc/selvedge /usr/share/selvedge /var/log/selvedge /var/lib/selvedge "$unit" \
    /var/www/html/index.selvedge.html; do
    [[ -e $f ]] && left+=("$f")
done
((${#left[@]} == 0)) || fail "left after purge: ${left[*]}"
dpkg-query -W selvedge >/dev/null 2>&1 && [[ $(dpkg-query -W -f '${db:Status-Status}' selvedge) != not-installed ]] &&
    fail "still known to dpkg: $(dpkg-query -W -f '${db:Status-Abbrev}' selvedge)"
say "purged: nothing left but the selvedge user (Debian policy keeps system users)"
