#!/bin/bash
# labkit on a CloudLab node, at every boot (profile.py runs it as root on every node):
# the kit's Debian packages, the kit in the experiment user's ~/labkit (only if it is not there
# yet: a reboot never touches a student's files), its .venv and data (make setup data: they keep
# what is installed), passwordless ssh between the nodes (geni-get key), the shared folder
# (--shared DIR: node0 exports it over NFS, the others mount it), and on node0 ~/hosts.txt.
#   startup.sh --node node0 --nodes 4 [--log FILE] [--shared /mydata] [--mirror URL_OR_DIR]
#              [--user NAME] [--repository DIR] [--wait SECONDS]
#   startup.sh --update [--hosts FILE] [--mirror URL_OR_DIR] [--user NAME] [--repository DIR]
# A home may be one folder every node mounts (NFS): the nodes then take turns on it, each holding
# ~/.labkit-boot.lock (made by an atomic mkdir) while it copies, installs and writes there; a node
# waits at most --wait seconds (default 2700) for another, saying which. ~/.labkit-ready/NODE
# holds NODE's boot id once its setup of this boot is done (removed first, so it never speaks
# for a boot still setting up); node0 writes ~/hosts.txt once every node is ready, or says which
# are not. --update (make cloudlab-update, on node0) pulls the repository, brings ~/labkit up to
# date from it but for the students' notebooks (new ones are added, none is overwritten),
# reinstalls, and does the same on the hosts file's other nodes (labkit nodes setup --keep notebooks).
# --log appends this run's output to FILE.
set -euo pipefail

node="" nodes=1 mirror="" user="" repository=/local/repository log="" shared="" wait=2700 update="" hosts=""
while [ $# -gt 0 ]; do
    case "$1" in
        --node) node=$2; shift 2 ;;
        --nodes) nodes=$2; shift 2 ;;
        --mirror) mirror=$2; shift 2 ;;
        --user) user=$2; shift 2 ;;
        --repository) repository=$2; shift 2 ;;
        --log) log=$2; shift 2 ;;
        --shared) shared=$2; shift 2 ;;
        --wait) wait=$2; shift 2 ;;
        --update) update=1; shift ;;
        --hosts) hosts=$2; shift 2 ;;
        *) echo "startup.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$wait" in ''|*[!0-9]*) echo "startup.sh: --wait takes whole seconds, not $wait" >&2; exit 2 ;; esac
if [ -n "$log" ]; then exec >>"$log" 2>&1; fi
[ "$(id -u)" -eq 0 ] || { echo "startup.sh: run it as root (sudo), with --user NAME for the experiment's user" >&2; exit 2; }
# the experiment's creator: CloudLab's geni-get knows them; else whoever ran sudo
if [ -z "$user" ] && command -v geni-get >/dev/null 2>&1; then user=$(geni-get user_urn | awk -F+ '{print $NF}'); fi
user=${user:-${SUDO_USER:-}}
home=$(getent passwd "$user" | cut -d: -f6 || true)
[ -n "$user" ] && [ -d "$home" ] || { echo "startup.sh: no user to set up the kit for (--user NAME)" >&2; exit 2; }
node=${node:-$(hostname -s)}
as_user() { runuser -u "$user" -- "$@"; }
kit=$home/labkit ready_dir=$home/.labkit-ready lock=$home/.labkit-boot.lock
boot=$(cat /proc/sys/kernel/random/boot_id)

# One node at a time in a home: the one whose mkdir makes the lock (atomic on NFS too). A lock
# this node left at an earlier boot, or by a start-up that has ended, is removed; another node's
# is waited for, at most --wait seconds, naming that node.
held=""
release_home() { if [ -n "$held" ]; then as_user rm -rf "$lock"; held=""; fi; }
trap release_home EXIT
trap 'exit 143' TERM INT
take_home() {
    local waited=0 said=-1 owner o_node o_boot o_pid o_since
    while ! as_user mkdir "$lock" 2>/dev/null; do
        owner=$(cat "$lock/owner" 2>/dev/null || true)
        read -r o_node o_boot o_pid o_since <<<"$owner" || true
        if [ "${o_node:-}" = "$node" ] && { [ "${o_boot:-}" != "$boot" ] || ! kill -0 "${o_pid:-0}" 2>/dev/null; }; then
            echo "removing the lock an earlier start-up of $node left in $home ($owner)"
            as_user rm -rf "$lock"
            continue
        fi
        if [ "$waited" -ge "$wait" ]; then
            echo "startup.sh: $node waited $wait s for ${o_node:-another node} to finish setting up the kit in $home" \
                "(shared with it; $lock: ${owner:-no owner written}). See the end of ${o_node:-that node}'s log" \
                "(/local/labkit-startup.log there); if no node is setting up any more, remove $lock and reboot $node" >&2
            exit 5
        fi
        if [ $((waited / 60)) -ne "$said" ]; then
            said=$((waited / 60))
            echo "waiting for ${o_node:-another node}, which sets up the kit in $home (shared with it) since" \
                "${o_since:-just now}: ${waited} s of at most $wait s"
        fi
        sleep 5
        waited=$((waited + 5))
    done
    held=1
    echo "$node $boot $$ $(date -u +%FT%TZ)" | as_user sh -c "cat > '$lock/owner'"
}

# The repository's kit (not its .git or build output) into the folder $1; with "keep", the
# notebooks already in $1 stay as they are (the students'): only notebooks it lacks are added.
copy_kit() {
    local into=$1 keep=${2:-}
    tar -C "$repository" --exclude=./.git --exclude=./.venv --exclude=./data --exclude=./runs --exclude=./out \
        --exclude=./release ${keep:+--exclude=./notebooks} -cf - . | as_user tar -C "$into" -xf -
    if [ -n "$keep" ] && [ -d "$repository/notebooks" ]; then
        tar -C "$repository" --exclude='./notebooks/runs' -cf - ./notebooks | as_user tar -C "$into" --skip-old-files -xf -
    fi
}

install_kit() {
    as_user make -C "$kit" setup PYTHON="$python"
    as_user make -C "$kit" data ${mirror:+DATA_MIRROR=$mirror}
}

# the image's Python: TensorFlow 2.21 and the kit's pins (numpy 2.4, pandas 3.1) need 3.11 to 3.13
python=$(command -v python3 || true)
version=$([ -n "$python" ] && "$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' || echo none)
case "$version" in
    3.11|3.12|3.13) ;;
    *) echo "startup.sh: this image's python3 is $version; the kit needs Python 3.11 to 3.13 (choose the" \
            "UBUNTU24-64-STD image)" >&2; exit 3 ;;
esac

if [ -n "$update" ]; then
    echo "=== labkit update on $node for $user: $(date)"
    [ -d "$kit" ] || { echo "startup.sh: $kit is not there: the kit is copied at the node's first boot" >&2; exit 2; }
    if git -C "$repository" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        runuser -u "$(stat -c %U "$repository")" -- git -C "$repository" pull -q --ff-only ||
            { echo "startup.sh: could not pull $repository (above: why); fix it there, then run this again" >&2; exit 6; }
        echo "$repository is at $(git -C "$repository" log -1 --format='%h %s')"
    fi
    take_home
    copy_kit "$kit" keep
    echo "brought $kit up to date from $repository; its notebooks are left as they are (new ones added)"
    install_kit
    release_home
    hosts=${hosts:-$home/hosts.txt}
    if [ -s "$hosts" ]; then
        as_user env -C "$kit" .venv/bin/python -m labkit nodes setup --hosts "$hosts" --keep notebooks \
            ${mirror:+--data-mirror "$mirror"}
    else
        echo "no $hosts: only this node's kit was brought up to date"
    fi
    echo "=== labkit updated: $(date)"
    exit 0
fi

echo "=== labkit startup on $node for $user, boot $boot: $(date)"
as_user mkdir -p "$ready_dir"
as_user rm -f "$ready_dir/$node"

# 1. Debian packages (README): the Python's venv, make, git; ip and tc; bubblewrap (grading); NFS
packages="python$version-venv make git iproute2 bubblewrap"
if [ -n "$shared" ]; then packages="$packages $([ "$node" = node0 ] && echo nfs-kernel-server || echo nfs-common)"; fi
missing=$(for p in $packages; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done)
if [ -n "$missing" ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

take_home
# 2. the kit: the repository's files in ~/labkit, once. A reboot finds it there and leaves it: the
# students' notebooks are theirs. The copy goes to a temporary folder first, so a boot cut short
# leaves no half kit that later boots would take for a whole one.
if [ ! -e "$kit" ]; then
    copy=$(as_user mktemp -d "$home/.labkit-copy.XXXXXX")
    copy_kit "$copy"
    as_user mv -T "$copy" "$kit"
    echo "copied the kit from $repository to $kit"
else
    echo "$kit is there already: left as it is"
fi
# 3. its .venv and the data, verified by their checksums, from the course mirror (empty: the public ones)
install_kit

# 4. passwordless ssh between the nodes: the experiment's own key pair from CloudLab (geni-get key)
if command -v geni-get >/dev/null 2>&1; then
    key=$home/.ssh/labkit_experiment_key
    as_user mkdir -p -m 700 "$home/.ssh"
    geni-get key | as_user sh -c "umask 077 && cat > '$key.new'"
    as_user mv "$key.new" "$key"
    as_user sh -c "ssh-keygen -y -f '$key' > '$key.pub'"
    grep -qxF "$(cat "$key.pub")" "$home/.ssh/authorized_keys" 2>/dev/null ||
        as_user sh -c "cat '$key.pub' >> '$home/.ssh/authorized_keys'"
    grep -q "^# labkit: the experiment's nodes" "$home/.ssh/config" 2>/dev/null || as_user sh -c "cat >> '$home/.ssh/config'" <<CONFIG
# labkit: the experiment's nodes, by name or LAN address, with the experiment's key
Host node* 10.10.1.*
    IdentityFile $key
    StrictHostKeyChecking accept-new
CONFIG
    echo "ssh between the nodes: $key"
fi
release_home

# 5. the shared folder: node0's (its blockstore) exported to the LAN; mounted on the others
if [ -n "$shared" ] && [ "$node" = node0 ]; then
    mkdir -p "$shared" && chown "$user" "$shared"
    grep -q "^$shared " /etc/exports 2>/dev/null || echo "$shared 10.10.1.0/24(rw,sync,no_subtree_check)" >> /etc/exports
    exportfs -ra
elif [ -n "$shared" ]; then
    mkdir -p "$shared"
    for _ in $(seq 60); do mountpoint -q "$shared" || mount -t nfs node0:"$shared" "$shared" 2>/dev/null && break; sleep 10; done
    mountpoint -q "$shared" || { echo "startup.sh: could not mount node0:$shared on $shared" >&2; exit 4; }
fi
echo "$boot" | as_user sh -c "cat > '$ready_dir/$node'"
echo "=== labkit ready on $node: $(date)"

# 6. node0: the hosts file of docs/cluster.md, from CloudLab's /etc/hosts, once every node is
# ready: its ready file, in this home if the nodes share it, else in its own (asked over ssh)
node_ready() {
    [ -s "$ready_dir/$1" ] ||
        as_user ssh -o BatchMode=yes -o ConnectTimeout=5 -- "$1" test -s ".labkit-ready/$1" </dev/null >/dev/null 2>&1
}
if [ "$node" = node0 ]; then
    names=$(seq -f "node%g" 0 $((nodes - 1)))
    waited=0
    while true; do
        pending=$(for n in $names; do node_ready "$n" || echo "$n"; done | tr '\n' ' ')
        [ -z "$pending" ] && break
        if [ "$waited" -ge "$wait" ]; then
            echo "startup.sh: after $wait s, not ready: ${pending% }; each says why at the end of its log" \
                "(/local/labkit-startup.log there), and a reboot runs its setup again. No ~/hosts.txt yet: once they" \
                "are ready, \`getent hosts $(echo $names) > ~/hosts.txt\` on node0" >&2
            exit 5
        fi
        [ $((waited % 60)) -eq 0 ] && echo "waiting for ${pending% } to be ready (${waited} s of at most $wait s)"
        sleep 5
        waited=$((waited + 5))
    done
    as_user sh -c "getent hosts $(echo $names) > '$home/hosts.txt.new'" || true
    found=$(wc -l < "$home/hosts.txt.new")
    [ "$found" -eq "$nodes" ] || { echo "startup.sh: /etc/hosts resolves $found of the $nodes nodes ($(echo $names))" >&2; exit 4; }
    as_user mv "$home/hosts.txt.new" "$home/hosts.txt"
    echo "every node is ready; wrote $home/hosts.txt:"; cat "$home/hosts.txt"
fi
