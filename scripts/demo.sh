#!/usr/bin/env bash
# Runs guardd on the embedded demo profile (DESIGN.md's example rules) and
# tours guardctl against it: status, rules, checks, the fake credentials,
# the classifiers, a refused and an applied rules file, and the event
# timeline. Usage: scripts/demo.sh BINDIR
set -euo pipefail
bin=${1:-bin}
state=$(mktemp -d /tmp/guard-demo.XXXXXX)
ctl() { echo; echo "\$ guardctl $*"; "$bin/guardctl" --control "$state/control.sock" "$@" || echo "(exit status $?)"; }

"$bin/guardd" --demo --state-dir "$state" --proxy-listen 127.0.0.1:0 2>"$state/guardd.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$state"' EXIT
for _ in $(seq 100); do [ -S "$state/control.sock" ] && break; sleep 0.05; done

echo "guardd is running on the demo profile (pid $pid, state in $state)"
ctl status
ctl ca path
ctl rules show
ctl rules check --proto tcp --host api.github.com --port 443
ctl rules check --proto tcp --host api.github.com.evil.test --port 443
ctl rules check --proto tcp --host api.example.com --port 443
ctl rules check --proto tcp --host api.example.com --port 443 --method DELETE
ctl rules check --proto tcp --host api.internal --port 443 --method GET
ctl rules check --proto udp --ip 9.9.9.9 --port 53
ctl rules check --proto tcp --ip ::ffff:10.1.2.3 --port 22
ctl credentials list
ctl classify --method DELETE --url https://api.github.com/repos/acme/site
printf 'mutation { updateRef(input:{refId:"r", oid:"o", force:true}) { clientMutationId } }' > "$state/q.graphql"
printf '{"query":%s}' "$(sed 's/"/\\"/g; s/^/"/; s/$/"/' "$state/q.graphql")" > "$state/body.json"
ctl classify --method POST --url https://api.github.com/graphql --body "$state/body.json"
ctl approvals

printf 'allow tcp example.org:443\nallow tcp example.org:0\ndefault maybe\n' > "$state/bad.rules"
ctl rules apply "$state/bad.rules"
printf 'allow tcp api.github.com:443\nallow tcp example.org:443\ndeny any 10.0.0.0/8\ndefault deny\n' > "$state/new.rules"
ctl rules apply "$state/new.rules"
ctl rules check --proto tcp --host example.org --port 443
ctl events

echo
echo "\$ curl --proxy http://<guardd> https://api.internal/ -X PUT   # the explicit proxy, port from status"
proxy=$("$bin/guardctl" --control "$state/control.sock" status | awk '/^proxy /{print $2}')
printf 'allow tcp api.github.com:443\ndeny web api.internal PUT,DELETE\ndefault deny\n' > "$state/web.rules"
"$bin/guardctl" --control "$state/control.sock" rules apply "$state/web.rules" >/dev/null
curl -sS --max-time 5 --proxy "http://$proxy" --cacert "$state/ca.pem" -X PUT https://api.internal/ 2>&1 || true
echo "(api.internal does not resolve here; a PUT is refused before any lookup:"
echo " the 403 comes from guard's pipeline, after TLS interception with the workspace CA)"

kill -TERM $pid
wait $pid && echo && echo "guardd stopped cleanly; its log:" && cat "$state/guardd.log"
