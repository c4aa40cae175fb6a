"""The TP group's rendezvous store on loopback: rank 0 serves a TCPStore on 127.0.0.1 only.

torch's own TCPStore server listens on every interface; here rank 0 binds the socket to
127.0.0.1 itself and hands it to torch (`master_listen_fd`), and the other ranks connect. The
libuv server takes a handed-over socket from torch 2.8 on (pytorch#150215); on older torch
(2.5.1 is vLLM-Kunlun's) it refuses one, so the legacy server serves it there, the same wire
protocol either way.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket

import torch
import torch.distributed as dist

LIBUV_LISTEN_FD_SINCE = (2, 8)


def is_loopback(host: str) -> bool:
    """`host` names this machine's loopback: localhost, 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def libuv_takes_listen_fd(version: str | None = None) -> bool:
    """Whether the libuv TCPStore server of torch `version` (default: this one) serves on a
    socket handed to it. A version that is not a release number is taken for a recent one."""
    parts = (version or torch.__version__).split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= LIBUV_LISTEN_FD_SINCE
    except (IndexError, ValueError):
        return True


def loopback_store(timeout: datetime.timedelta) -> dist.TCPStore:
    """The group's TCPStore on 127.0.0.1:MASTER_PORT: rank 0 serves it on a socket it binds to
    127.0.0.1 itself (handed to torch, which owns it from then on); the other ranks connect."""
    port, rank, world = int(os.environ["MASTER_PORT"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    use_libuv = libuv_takes_listen_fd()
    if rank != 0:
        return dist.TCPStore("127.0.0.1", port, world, False, timeout=timeout, use_libuv=use_libuv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(max(world, 16))
    except OSError:
        sock.close()
        raise
    return dist.TCPStore("127.0.0.1", port, world, True, timeout=timeout, wait_for_workers=False,
                         master_listen_fd=sock.detach(), use_libuv=use_libuv)
