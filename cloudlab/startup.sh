#!/bin/bash
# labkit on a CloudLab node, at every boot (profile.py runs it as root on every node):
# the kit's Debian packages, the kit in the experiment user's ~/labkit (only if it is not there
# yet: a reboot never touches a student's files), its .venv and data (make setup data: they keep
# what is installed), passwordless ssh between the nodes (geni-get key), the shared folder
# (--shared DIR: node0 exports it over NFS, the others mount it), and on node0 ~/hosts.txt.
#   startup.sh --node node0 --nodes 4 [--log FILE] [--shared /mydata] [--mirror URL_OR_DIR]
#              [--user NAME] [--repository DIR]
# --log appends this boot's output to FILE. ~/labkit/.cloudlab-ready holds the boot's id once
# this boot's setup is done (it is removed first, so it never speaks for an earlier boot).
set -euo pipefail

node="" nodes=1 mirror="" user="" repository=/local/repository log="" shared=""
while [ $# -gt 0 ]; do
    case "$1" in
        --node) node=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --mirror) mirror=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --repository) repository=$2; shift 2 ;;
        --log) log=$2; shift 2 ;;
        --shared) shared=$2; shift 2 ;;
        *) echo "startup.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -n "$log" ]; then exec >>"$log" 2>&1; fi
# the experiment's creator: CloudLab's geni-get knows them; else whoever ran sudo
if [ -z "$user" ] && command -v geni-get >/dev/null 2>&1; then user=$(geni-get user_urn | awk -F+ '{print $NF}'); fi
user=${user:-${SUDO_USER:-}}
home=$(getent passwd "$user" | cut -d: -f6)
[ -n "$user" ] && [ -d "$home" ] || { echo "startup.sh: no user to set up the kit for (--user NAME)" >&2; exit 2; }
as_user() { runuser -u "$user" -- "$@"; }
kit=$home/labkit ready=$home/labkit/.cloudlab-ready
boot=$(cat /proc/sys/kernel/random/boot_id)
echo "=== labkit startup on ${node:-$(hostname)} for $user, boot $boot: $(date)"
rm -f "$ready"

# 1. the image's Python: TensorFlow 2.21 and the kit's pins (numpy 2.4, pandas 3.1) need 3.11 to 3.13
python=$(command -v python3 || true)
version=$([ -n "$python" ] && "$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' || echo none)
case "$version" in
    3.11|3.12|3.13) ;;
    *) echo "startup.sh: this image's python3 is $version; the kit needs Python 3.11 to 3.13 (choose the" \
            "UBUNTU24-64-STD image)" >&2; exit 3 ;;
esac

# 2. Debian packages (README): the Python's venv, make, git; ip and tc; bubblewrap (grading); NFS
packages="python$version-venv make git iproute2 bubblewrap"
if [ -n "$shared" ]; then packages="$packages $([ "$node" = node0 ] && echo nfs-kernel-server || echo nfs-common)"; fi
missing=$(for p in $packages; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done)
if [ -n "$missing" ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

# 3. the kit: the repository's files (not its .git or build output) in ~/labkit, once. A reboot
# finds it there and leaves it: the students' notebooks are theirs. The copy goes to a temporary
# folder first, so a boot cut short leaves no half kit that later boots would take for a whole one.
if [ ! -e "$kit" ]; then
    copy=$(as_user mktemp -d "$home/.labkit-copy.XXXXXX")
    tar -C "$repository" --exclude=./.git --exclude=./.venv --exclude=./data --exclude=./runs --exclude=./out \
        --exclude=./release -cf - . | as_user tar -C "$copy" -xf -
    as_user mv -T "$copy" "$kit"
    echo "copied the kit from $repository to $kit"
else
    echo "$kit is there already: left as it is"
fi
as_user make -C "$kit" setup PYTHON="$python"

# 4. the data, verified by its checksums, from the course mirror (empty: the public mirrors)
as_user make -C "$kit" data ${mirror:+DATA_MIRROR=$mirror}

# 5. passwordless ssh between the nodes: the experiment's own key pair from CloudLab (geni-get key)
if command -v geni-get >/dev/null 2>&1; then
    key=$home/.ssh/labkit_experiment_key
    as_user mkdir -p -m 700 "$home/.ssh"
    geni-get key | as_user sh -c "umask 077 && cat > '$key.new'"
    as_user mv "$key.new" "$key"
    as_user sh -c "ssh-keygen -y -f '$key' > '$key.pub'"
    grep -qxF "$(cat "$key.pub")" "$home/.ssh/authorized_keys" 2>/dev/null ||
        as_user sh -c "cat '$key.pub' >> '$home/.ssh/authorized_keys'"
    grep -q "^# labkit: the experiment's nodes" "$home/.ssh/config" 2>/dev/null || as_user sh -c "cat >> '$home/.ssh/config'" <<EOF
# labkit: the experiment's nodes, by name or LAN address, with the experiment's key
Host node* 10.10.1.*
    IdentityFile $key
    StrictHostKeyChecking accept-new
EOF
    echo "ssh between the nodes: $key"
fi

# 6. the shared folder: node0's (its blockstore) exported to the LAN; mounted on the others
if [ -n "$shared" ] && [ "$node" = node0 ]; then
    mkdir -p "$shared" && chown "$user" "$shared"
    grep -q "^$shared " /etc/exports 2>/dev/null || echo "$shared 10.10.1.0/24(rw,sync,no_subtree_check)" >> /etc/exports
    exportfs -ra
elif [ -n "$shared" ]; then
    mkdir -p "$shared"
    for _ in $(seq 60); do mountpoint -q "$shared" || mount -t nfs node0:"$shared" "$shared" 2>/dev/null && break; sleep 10; done
    mountpoint -q "$shared" || { echo "startup.sh: could not mount node0:$shared on $shared" >&2; exit 4; }
fi

# 7. node0: the hosts file of docs/cluster.md, from CloudLab's /etc/hosts
if [ "$node" = node0 ]; then
    names=$(seq -f "node%g" 0 $((nodes - 1)) | tr '\n' ' ')
    as_user sh -c "getent hosts $names > '$home/hosts.txt'"
    echo "wrote $home/hosts.txt:"; cat "$home/hosts.txt"
fi
echo "$boot" | as_user sh -c "cat > '$ready'"
echo "=== labkit ready on ${node:-$(hostname)}: $(date)"
