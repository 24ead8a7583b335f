#!/bin/bash
# labkit on a CloudLab node, once at boot (cloudlab/profile.py runs it as root on every node):
# the kit's Debian packages, the kit in the experiment user's ~/labkit (make setup), the data
# from the course mirror (make data), and on node0 ~/hosts.txt from CloudLab's /etc/hosts.
#   startup.sh --node node0 --nodes 4 [--mirror URL_OR_DIR] [--user NAME] [--repository DIR]
# Its log is /local/labkit-startup.log; ~/labkit/.cloudlab-ready appears when it is done.
set -euo pipefail

node="" nodes=1 mirror="" user="" repository=/local/repository
while [ $# -gt 0 ]; do
    case "$1" in
        --node) node=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --mirror) mirror=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --repository) repository=$2; shift 2 ;;
        *) echo "startup.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
# the experiment's creator: CloudLab's geni-get knows them; else whoever ran sudo
if [ -z "$user" ] && command -v geni-get >/dev/null 2>&1; then user=$(geni-get user_urn | awk -F+ '{print $NF}'); fi
user=${user:-${SUDO_USER:-}}
home=$(getent passwd "$user" | cut -d: -f6)
[ -n "$user" ] && [ -d "$home" ] || { echo "startup.sh: no user to set up the kit for (--user NAME)" >&2; exit 2; }
as_user() { runuser -u "$user" -- "$@"; }
echo "labkit startup on ${node:-$(hostname)} for $user: $(date)"

# 1. Debian packages (README): Python 3.11 and venv, make, git; ip and tc; bubblewrap (grading)
packages="python3.11 python3.11-venv make git iproute2 bubblewrap"
missing=$(for p in $packages; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done)
if [ -n "$missing" ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

# 2. the kit: this repository's files (not its .git or build output) in ~/labkit, installed
as_user mkdir -p "$home/labkit"
tar -C "$repository" --exclude=./.git --exclude=./.venv --exclude=./data --exclude=./runs --exclude=./out \
    --exclude=./release -cf - . | as_user tar -C "$home/labkit" -xf -
as_user make -C "$home/labkit" setup PYTHON=python3.11

# 3. the data, verified by its checksums, from the course mirror (empty: the public mirrors)
as_user make -C "$home/labkit" data ${mirror:+DATA_MIRROR=$mirror}

# 4. node0: the hosts file of docs/cluster.md, from CloudLab's /etc/hosts
if [ "$node" = node0 ]; then
    names=$(seq -f "node%g" 0 $((nodes - 1)) | tr '\n' ' ')
    as_user sh -c "getent hosts $names > '$home/hosts.txt'"
    echo "wrote $home/hosts.txt:"; cat "$home/hosts.txt"
fi
as_user touch "$home/labkit/.cloudlab-ready"
echo "labkit ready on ${node:-$(hostname)}: $(date)"
