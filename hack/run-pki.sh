#!/bin/sh
# hack/run-pki.sh DIR: a CA of its own and a client certificate it signed, for `make
# run`'s kubelet port (--client-ca-file=DIR/ca.crt) and the README's curl
# (--cert DIR/client.crt --key DIR/client.key). Idempotent: an existing set is kept.
# The CA's key stays in DIR: fine for a developer's machine, not for a node (README,
# "Standalone nodes").
set -eu
dir=${1:?usage: hack/run-pki.sh DIR}
[ -s "$dir/ca.crt" ] && [ -s "$dir/client.crt" ] && [ -s "$dir/client.key" ] && exit 0
command -v openssl >/dev/null || { echo "hack/run-pki.sh: openssl is needed (apt-get install openssl)" >&2; exit 1; }
umask 077
mkdir -p "$dir"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
# shellcheck disable=SC2086 # $ec is several words on purpose
openssl req -x509 $ec -days 3650 -subj /CN=rkubelet-run-ca \
	-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
	-keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
# shellcheck disable=SC2086
openssl req $ec -subj /CN=admin/O=system:masters \
	-keyout "$dir/client.key" -out "$dir/client.csr" 2>/dev/null
printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n' > "$dir/client.ext"
openssl x509 -req -days 365 -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
	-CAcreateserial -CAserial "$dir/ca.srl" -extfile "$dir/client.ext" -out "$dir/client.crt" 2>/dev/null
rm -f "$dir/client.csr" "$dir/client.ext"
echo "hack/run-pki.sh: CA $dir/ca.crt, client certificate $dir/client.crt (CN=admin)"
