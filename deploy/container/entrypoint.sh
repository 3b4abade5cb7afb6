#!/bin/sh
# capsule's container entrypoint. Started as root in a container whose
# cgroup is writable (podman: --security-opt unmask=ALL; docker:
# --cap-add SYS_ADMIN, for the remount below),
# it delegates a cgroup subtree to the unprivileged user $CAPSULE_USER
# (default: capsule) the way systemd's Delegate=yes does, then runs the
# command as that user; capsule refuses root. Started as any other user it
# runs the command as it is (runs then have cgroup limits only where that
# user can write its cgroup). docs/containers.md.
set -eu
[ "$(id -u)" = 0 ] || exec "$@"
user=${CAPSULE_USER:-capsule}
cg=/sys/fs/cgroup
# docker mounts the container's cgroup read-only; with CAP_SYS_ADMIN
# (docker: --cap-add SYS_ADMIN) root here can make it writable. Only
# root's: the command runs as the user, without capabilities.
[ -w "$cg/cgroup.procs" ] || mount -o remount,rw "$cg" 2>/dev/null || true
if [ -w "$cg/cgroup.subtree_control" ] && [ -w "$cg/cgroup.procs" ]; then
  mkdir -p "$cg/init" "$cg/capsule"
  # "No internal processes": the container's processes leave its root
  # cgroup for a leaf before controllers are enabled below it.
  for pid in $(cat "$cg/cgroup.procs"); do
    echo "$pid" > "$cg/init/cgroup.procs" 2>/dev/null || true
  done
  ctrls=""
  for c in $(cat "$cg/cgroup.controllers"); do
    case "$c" in cpu|cpuset|io|memory|pids) ctrls="$ctrls +$c" ;; esac
  done
  echo "$ctrls" > "$cg/cgroup.subtree_control"
  chown "$user" "$cg/capsule" "$cg/capsule/cgroup.procs" "$cg/capsule/cgroup.subtree_control" "$cg/capsule/cgroup.threads"
  echo $$ > "$cg/capsule/cgroup.procs"
else
  echo "entrypoint: $cg is read-only in this container: runs get no cgroup limits (degraded mode); podman: --security-opt unmask=ALL; docker: --cap-add SYS_ADMIN" >&2
fi
exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- "$@"
